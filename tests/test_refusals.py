"""Parameters a fit would silently ignore or cap, and refusals that blame the wrong parameter: a parameter the
configuration does not use is refused, an iteration count of 0 that would release an untrained model is refused,
a capped step says so where the user looks, every refusal of an extreme value names the parameter set, and the
work estimate counts the visits of SGD's block grid."""
import math, re, warnings

import numpy as np
import pytest

from dpmf_lit.core.checks import Check
from dpmf_lit.data.synthetic import synthetic
from dpmf_lit.model.mechanism import ITERATIONS, MAX_WORK, Above, mechanisms

MECHANISMS = mechanisms()


@pytest.fixture(scope="module")
def tiny():
    return synthetic(60, 40, 900, rank=3, noise=0.3, seed=3)


def defaults(cls) -> dict:
    return {k: d for k, d, _ in cls.parameter_docs()}


# ---------------------------------------------------------------- a parameter the configuration does not use is refused
def _choices(cls, k) -> list:
    "The values the declared check of `k` accepts from a short list of candidates (choices, booleans, small numbers)."
    check = cls.parameter_checks().get(k)
    found = re.findall(r"'([^']*)'", repr(check)) if check is not None else []
    out = []
    for v in [*found, True, False, 0, 1, 2, 3, 0.0, 0.1, 0.5]:
        try: ok = check is None or check(k, v) == v and type(check(k, v)) is type(v)
        except ValueError: ok = False
        if ok and v not in out: out.append(v)
    return out


def _a_value(cls, k, config: dict):
    "A value of `k` the mechanism accepts in `config` (its default where it has one)."
    d = defaults(cls)[k]
    if d is not None: return d
    for v in (2, 0.5, 1.0, 65_536, "mean"):
        try: cls(**config, **{k: v})
        except ValueError: continue
        return v
    raise AssertionError(f"{cls.name}: no value of {k} found")


APPLIES = [(name, k) for name, cls in MECHANISMS.items() for k in cls.applies]


@pytest.mark.parametrize("name,k", APPLIES, ids=[f"{n}-{k}" for n, k in APPLIES])
def test_every_applies_entry_refuses_the_configuration_that_ignores_it(name, k):
    "For each mechanism and each `applies` entry: given in a configuration that does not use it, refused by name; given where it applies, accepted."
    cls = MECHANISMS[name]
    other, values = cls.applies[k]
    unused = [v for v in _choices(cls, other) if v not in values]
    used = [v for v in _choices(cls, other) if v in values]
    assert unused and used, (name, k, other)
    value = _a_value(cls, k, {other: used[0]})
    for v in unused:
        with pytest.raises(ValueError, match=rf"^{re.escape(k)}=.*{re.escape(other)}="):
            cls(**{other: v, k: value})


IGNORED = [   # (mechanism, the configuration, a parameter it would ignore): each found by reading `_fit`
    ("dpals", dict(center="global"), dict(reg_bias=10.0)),          # the item offsets' λ; the global mean has none
    ("pmf", dict(bias=False), dict(reg_bias=1.0)),                   # the biases' penalty, without biases
    ("gauss", dict(private=False), dict(rating_range=2.0)),          # τ only scales the noise
    ("gauss", dict(private=False), dict(variant="both")),            # which gradients get noise, without noise
    ("xin", dict(mode="local"), dict(weight=0.1)),                   # local: nobody responds
    ("xin", dict(mode="full-em"), dict(weight=0.1)),                 # full-em: private users join the EM at weight 1
    ("xin", dict(mode="local"), dict(batch=5)),
    ("xin", dict(mode="local"), dict(n_private=10)),
    ("dp-bias-features", dict(prior_share=0.0), dict(max_norm=2.0)),  # B clips the prior's coefficients: no prior, no B
]


@pytest.mark.parametrize("name,config,given", IGNORED, ids=[f"{n}-{list(g)[0]}-{list(c.values())[0]}" for n, c, g in IGNORED])
def test_a_parameter_the_configuration_ignores_is_refused(name, config, given):
    cls = MECHANISMS[name]
    (k, v), = given.items()
    assert k in cls.applies, f"{name}: {k} is not declared in applies"
    with pytest.raises(ValueError, match=rf"^{re.escape(k)}=.* does not use {re.escape(k)}"): cls(**config, **given)


def test_an_unused_parameter_is_left_out_of_the_params_that_ran(tiny):
    fit = MECHANISMS["dpals"](center="global", d=2, epochs=1, max_ratings=20, seed=0).fit(tiny)
    assert "reg_bias" not in fit.params and fit.params["center"] == "global"
    assert "reg_bias" in MECHANISMS["dpals"](d=2, epochs=1, max_ratings=20, seed=0).fit(tiny).params
    assert 3.0 in Above(0) and 0.0 not in Above(0) and True not in Above(0) and repr(Above(0)) == "> 0"


# ---------------------------------------------------------------- an iteration count of 0
MEANINGFUL_ZERO = {("xin", "sweeps"): "PMD's greedy swaps: 0 releases uniform candidates, the model itself is trained"}


def _counts():
    "(mechanism, iteration count) pairs: the vocabulary's iteration counts each mechanism declares."
    return [(name, k) for name, cls in MECHANISMS.items() for k in ITERATIONS if k in cls.parameter_names()]


@pytest.mark.parametrize("name,k", _counts(), ids=[f"{n}-{k}" for n, k in _counts()])
def test_zero_iterations_are_refused_unless_zero_means_something(name, k, tiny):
    "hua and hua-protocol used to take epochs=0 and release V = 0, a model nothing trained."
    cls = MECHANISMS[name]
    config = {}
    if k in cls.applies: config[cls.applies[k][0]] = cls.applies[k][1][0]   # where the count is used
    if (name, k) in MEANINGFUL_ZERO:
        cls(**config, **{k: 0})
        return
    with pytest.raises(ValueError, match=rf"^{k}=0 must be an integer >= 1"): cls(**config, **{k: 0})


def test_hua_gradient_descent_with_no_step_was_an_untrained_model():
    with pytest.raises(ValueError, match="epochs=0"): MECHANISMS["hua"](solver="gd", epochs=0)
    with pytest.raises(ValueError, match="epochs=0"): MECHANISMS["hua-protocol"](epochs=0)


# ---------------------------------------------------------------- a capped step is said where the user looks
@pytest.mark.parametrize("name", ["dp-pmf", "pdp-pmf"])
def test_a_step_capped_per_row_is_reported(name, tiny):
    "The perturbed-gradient mechanisms cap each row's step γ/|Ω| at its stable value: with a huge lr every step runs at its cap."
    cls = MECHANISMS[name]
    base = {**cls.test_params, "seed": 0}
    big, small = cls(**base, lr=1e300).fit(tiny), cls(**base, lr=1e-9).fit(tiny)
    assert big.params["lr_capped"] is True and small.params["lr_capped"] is False
    assert any(h.get("lr_capped", 0) == 1.0 for h in big.history), big.history
    assert big.notes and "lr=1e+300" in big.notes[0] and "every step" in big.notes[0] and not small.notes
    assert np.array_equal(big.V, cls(**base, lr=1e200).fit(tiny).V)   # what the note says: a larger lr changes nothing


def test_sgld_says_its_capped_step_in_a_note(tiny):
    cls = MECHANISMS["sgld"]
    big = cls(**cls.test_params, lr=1e300, seed=0).fit(tiny)
    assert big.params["lr_capped"] is True and big.notes and "lr=1e+300" in big.notes[0] and "capped" in big.notes[0]
    assert not cls(**cls.test_params, lr=1e-6, seed=0).fit(tiny).notes


@pytest.mark.parametrize("name,lr", [("dp-pmf", 1e300), ("pdp-pmf", 1e300), ("sgld", 1e300)])
def test_the_text_output_of_fit_shows_the_cap(name, lr):
    "`dpmf fit` prints the notes under its result, not only in --json."
    from dpmf_lit.cli.main import fit_report, fit_summary
    cls = MECHANISMS[name]
    rep = fit_report(name, "synthetic:n_users=60,n_items=40,n_ratings=900", {**cls.test_params, "lr": lr, "seed": 0})
    assert rep["notes"] and rep["parameters"]["lr_capped"] is True
    text = fit_summary(rep, 100)
    assert "\nnote: lr=1e+300" in text and "capped" in text.split("\nnote: ", 1)[1], text
    assert max(map(len, text.splitlines())) <= 100


# ---------------------------------------------------------------- every refusal of an extreme value names the parameter set
CAUSE = re.compile(r"(?<![\w.])([A-Za-z_]\w*)=|\b(?:lower|raise)\s+([A-Za-z_]\w*)")


def first_cause(msg: str) -> str | None:
    "The parameter a refusal names first: as `name=value` or in advice, 'lower name' / 'raise name'."
    m = CAUSE.search(msg)
    return m and (m.group(1) or m.group(2))


def _extreme_cases():
    out = []
    for name, cls in MECHANISMS.items():
        alias = {n: a for a, n in cls.aliases.items()}
        checks = cls.parameter_checks()
        for k, default, _ in cls.parameter_docs():
            if k == "seed": continue
            c = checks.get(k)
            kind = c.kind if c is not None else type(default) if isinstance(default, (int, float)) and not isinstance(default, bool) else None
            values = [10**12] if kind is int else [1e300, 1e-300] if kind is float else []
            for base in ("defaults", "test_params"):
                for v in values:
                    out += [(name, typed, v, base) for typed in (k, alias.get(k)) if typed]
    return out


EXTREME = _extreme_cases()


def _config(cls, k: str, base: str) -> dict:
    "The base parameters with `k`'s condition met (a parameter that applies), without `k`."
    config = dict(cls.test_params) if base == "test_params" else {}
    if k in cls.applies:
        other, values = cls.applies[k]
        if {**defaults(cls), **config}.get(other) not in values: config[other] = next(iter(values)) if not isinstance(values, Above) else 0.5
    config.update({("gauss", "epsilon"): {"variant": "both"}, ("pdp-pmf", "epsilon"): {"dropped": "zero"},
                   ("hua-protocol", "p_online"): {"scenario": 3}}.get((cls.name, k), {}))
    return {p: v for p, v in config.items() if p != k}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name,typed,value,base", EXTREME, ids=[f"{n}-{t}-{v:g}-{b}" for n, t, v, b in EXTREME])
def test_an_extreme_value_is_fitted_or_refused_naming_it(name, typed, value, base, tiny):
    """For every mechanism and numeric parameter (paper aliases too): at 1e12 (a count) or 1e300 / 1e-300 (a number),
    from the defaults and from the small test parameters, the fit ends or is refused by a message whose first named
    parameter is the one set, as typed. A fit that would run long must be refused by the work estimate before it starts
    (the timeout fails it)."""
    cls = MECHANISMS[name]
    k = cls.aliases.get(typed, typed)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try: cls(**_config(cls, k, base), **{typed: value}).fit(tiny)
        except ValueError as e:
            assert first_cause(str(e)) == typed, f"{name} {typed}={value!r}: the refusal names {first_cause(str(e))!r} first: {e}"


@pytest.mark.parametrize("name,given,cause", [
    ("hua", dict(pmf_epochs=10**12), "pmf_epochs"),               # was "d=10 ...: lower d" (U's ALS is d^3 a row)
    ("hua-protocol", dict(pmf_epochs=10**12), "pmf_epochs"),
    ("pmf", dict(solver="als", epochs=10**12, d=64), "epochs"),
    ("pmf", dict(d=10**12, epochs=5), "d"),
])
def test_the_work_and_memory_guards_name_the_parameter_that_causes_it(name, given, cause, tiny):
    with pytest.raises(ValueError) as e: MECHANISMS[name](**given).fit(tiny)
    assert first_cause(str(e.value)) == cause and f"lower {cause}" in str(e.value), str(e.value)



@pytest.mark.parametrize("name", ["pmf", "gauss"])
def test_an_overflow_on_ratings_of_an_extreme_scale_names_the_data_file(name, tiny):
    "Ratings near 1e30 at the default parameters: the overflow names the ratings (their scale where it is public), not a parameter."
    from dataclasses import replace
    from dpmf_lit.data.ratings import Ratings
    big = Ratings(tiny.user, tiny.item, tiny.rating * np.float32(1e30), tiny.n_users, tiny.n_items, 5e29, 6e30, "big.csv")
    with pytest.raises(ValueError, match=re.escape("the ratings 'big.csv' are on an extreme scale ([5e+29, 6e+30]): rescale the ratings")):
        MECHANISMS[name]().fit(big)
    with pytest.raises(ValueError, match=re.escape("the ratings 'big.csv' are on an extreme scale (read from the data)")):
        MECHANISMS[name]().fit(replace(big, scale_source="data"))   # a scale read from the data is not printed
    with pytest.raises(ValueError, match="lower lr=1000000.0"):
        MECHANISMS[name](lr=1e6).fit(big)                            # an extreme parameter given is still named first

# ---------------------------------------------------------------- the work estimate counts SGD's block visits
def test_the_work_estimate_counts_block_visits():
    from dpmf_lit.model.mf import BLOCK_VISIT
    r = synthetic(300, 200, 6000, seed=3)
    pmf, sgld = MECHANISMS["pmf"], MECHANISMS["sgld"]
    w = pmf(blocks=5000).work(r)
    assert w["blocks"] >= 100 * 5000**2 * BLOCK_VISIT, w                 # 100 epochs of 25 million block visits
    assert pmf(blocks=10).work(r).get("blocks", 0) < 1e-3 * w["blocks"]
    assert sgld(blocks=5000).work(r)["blocks"] >= 40 * 5000**2 * BLOCK_VISIT
    assert pmf(threads=2).work(r)["threads"] > 0 and "blocks" not in pmf(solver="als").work(r)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", ["pmf", "sgld"])
def test_an_absurd_grid_is_refused_before_any_work_naming_blocks(name):
    r = synthetic(300, 200, 6000, seed=3)
    for typed, value in (("blocks", 40_000), ("threads", 10**7)):     # blocks within its bounds, so the estimate refuses it
        with pytest.raises(ValueError, match=rf"^({re.escape(name)} with )?{typed}={value} .*lower {typed}"):
            MECHANISMS[name](**{typed: value}).fit(r)
    with pytest.raises(ValueError, match=r"^blocks=46341 must be an integer in \[1, 46340\]"):   # G x G keys past int32
        MECHANISMS[name](blocks=46_341)


def test_every_committed_grid_stays_far_under_the_limit():
    "At the grids in use (G = threads, 'cache', small G) the block term is a fraction of the ratings' own work, the total far under the limit."
    r = synthetic(943, 1682, 100_000, seed=0)   # MovieLens 100K's shape
    for name in ("pmf", "sgld"):
        for blocks in (None, "cache", 1, 2, 4, 8, 16, 32, 64):
            w = MECHANISMS[name](blocks=blocks).work(r)
            grid = w.get("blocks", 0) + w.get("threads", 0)
            assert grid < 0.25 * w["epochs"] and sum(w.values()) < 1e-3 * MAX_WORK, (name, blocks, w)
