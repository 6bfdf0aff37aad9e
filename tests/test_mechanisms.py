"""What every registered mechanism must do, checked on every mechanism the package registers
(found by `dpmf_lit.model.mechanism.mechanisms()`, so a new paper's mechanism is covered without editing
this file), and a throw-away mechanism module that proves the discovery path end to end."""
import dataclasses, inspect, json, math, os, subprocess, sys, uuid
from pathlib import Path

import numpy as np
import pytest

import dpmf_lit
from dpmf_lit.model.mechanism import FittedModel, Mechanism, PrivacyReport, get_mechanism, mechanisms
from dpmf_lit.model.vocabulary import VOCABULARY
from dpmf_lit.model.testing import small_split

MECHANISMS = mechanisms()
NAMES = sorted(MECHANISMS)


@pytest.fixture(scope="module")
def split():
    return small_split()


def build(name, **kw):
    "The mechanism `name` with its small test parameters, overridden by `kw`."
    cls = MECHANISMS[name]
    return cls(**{**cls.test_params, **kw})


def annotation(cls, k) -> str:
    "The type a parameter's declared `Check` stands for ('int | None'), else its annotation as written."
    check = cls.parameter_checks().get(k)
    if check is not None: return check.kind.__name__ + (" | None" if check.none else "")
    a = inspect.signature(cls.__init__).parameters[k].annotation
    return a if isinstance(a, str) else getattr(a, "__name__", str(a))


def test_the_package_mechanisms_are_found():
    assert {"pmf", "hua", "hua-protocol"} <= set(NAMES)
    for name, cls in MECHANISMS.items():
        assert issubclass(cls, Mechanism) and cls.name == name


@pytest.mark.parametrize("name", NAMES)
def test_parameters_are_documented_in_the_signature(name):
    cls = MECHANISMS[name]
    assert inspect.getdoc(cls) and inspect.getdoc(cls) != inspect.getdoc(Mechanism), f"{name}: no class docstring"
    docs = cls.parameter_docs()
    assert [k for k, _, _ in docs] == cls.parameter_names()   # a mechanism may have none (the global mean)
    missing = [k for k, _, doc in docs if not doc]
    assert not missing, f"{name}: parameters without a comment in the signature: {missing}"
    assert set(cls.test_params) <= set(cls.parameter_names())


@pytest.mark.parametrize("name", NAMES)
def test_fit_and_predict(name, split):
    train, test = split
    fit = build(name).fit(train)
    assert isinstance(fit, FittedModel) and fit.mechanism == name and fit.fit_seconds > 0
    assert fit.U.shape == (train.n_users, fit.d) and fit.V.shape == (train.n_items, fit.d)
    assert fit.U.dtype == np.float32 and fit.V.dtype == np.float32
    unused = {k for k, (other, values) in MECHANISMS[name].applies.items() if fit.params.get(other) not in values}
    assert set(fit.params) >= set(MECHANISMS[name].parameter_names()) - unused and not unused & set(fit.params)
    p = fit.predict_codes(test.user, test.item)
    assert p.shape == (len(test),) and p.dtype == np.float32 and np.isfinite(p).all()
    assert p.min() >= train.rating_min and p.max() <= train.rating_max   # FittedModel clips to the rating range
    out = fit.predict_codes(test.user[:0], test.item[:0])
    assert out.shape == (0,)


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_numbers_other_seed_other_numbers(name, split):
    train, _ = split
    seeded = {"seed": 3} if "seed" in MECHANISMS[name].parameter_names() else {}
    a, b = build(name, **seeded).fit(train), build(name, **seeded).fit(train)
    for x, y in ((a.U, b.U), (a.V, b.V), (a.user_bias, b.user_bias), (a.item_bias, b.item_bias)):
        if x is None: assert y is None
        else: np.testing.assert_array_equal(x, y)
    if seeded:
        c = build(name, seed=4).fit(train)
        same = lambda x, y: x is None and y is None or x is not None and y is not None and np.array_equal(x, y)
        assert not all(same(x, y) for x, y in ((a.U, c.U), (a.V, c.V), (a.user_bias, c.user_bias), (a.item_bias, c.item_bias))), \
            f"{name}: seed changes nothing"
        if a.privacy.method != "non-private": assert a.privacy.randomness == "public" and a.privacy.seed == 3


@pytest.mark.parametrize("name", [n for n in NAMES if getattr(MECHANISMS[n](), "seed", 0) is None] if NAMES else [])
def test_a_private_mechanism_keeps_its_randomness_secret_by_default(name, split):
    "seed=None (the default of every mechanism that adds noise): a seed from the OS, never stored; two fits differ."
    train, _ = split
    a, b = build(name).fit(train), build(name).fit(train)
    assert a.params["seed"] is None and a.privacy.randomness == "secret" and a.privacy.seed is None
    assert "randomness secret" in a.privacy.summary()
    same = lambda x, y: x is None and y is None or x is not None and y is not None and np.array_equal(x, y)
    assert not all(same(x, y) for x, y in ((a.U, b.U), (a.V, b.V), (a.user_bias, b.user_bias), (a.item_bias, b.item_bias))), \
        f"{name}: two secret fits agree"


@pytest.mark.parametrize("name", NAMES)
def test_privacy_report(name, split):
    train, _ = split
    rep = build(name).fit(train).privacy
    assert isinstance(rep, PrivacyReport)
    d = rep.to_dict()
    assert {"released", "unit", "epsilon", "delta", "method", "scope", "summary"} <= set(d)
    assert {"coverage", "condition", "neighbouring", "randomness", "epsilon_user"} <= set(d)
    assert set(rep.released) <= {"U", "V", "item_bias", "user_bias", "mean"}
    if rep.private:
        assert rep.unit in ("rating", "user") and rep.method and rep.method != "non-private"
        assert math.isfinite(rep.epsilon) and rep.epsilon >= 0 and rep.delta is not None and 0 <= rep.delta < 1
        assert rep.scope.strip() and rep.scope.strip().rstrip(".") in rep.summary()
        assert rep.coverage in ("end-to-end", "conditional") and rep.neighbouring in ("replace", "add_remove")
        assert rep.summary().startswith(rep.guarantee())
        assert rep.randomness in (("secret", "public") if "seed" in MECHANISMS[name].parameter_names() else ("",))   # nothing drawn: nothing to keep secret
        if rep.coverage == "conditional": assert rep.summary().startswith(rep.condition)   # the condition leads
        if rep.unit == "rating": assert rep.epsilon_user >= rep.epsilon   # per user by group privacy
        json.dumps(d)
    else:
        assert rep.epsilon is None and rep.delta is None and rep.coverage == "none"
        # plain non-private, or a weaker notion named by `method` (e.g. element-wise deniability), never passed off as DP
        lead = "non-private" if rep.method == "non-private" else f"no differential-privacy guarantee: {rep.method}"
        assert rep.summary().startswith(lead), rep.summary()


def bad_values(cls):
    "(parameter, bad value) pairs derived from each parameter's type annotation."
    out = []
    for k in cls.parameter_names():
        a = annotation(cls, k)
        if "bool" in a: out += [(k, "no"), (k, 1)]
        elif "float" in a: out += [(k, float("nan")), (k, "abc"), (k, True), (k, float("inf"))]
        elif "int" in a: out += [(k, "abc"), (k, True), (k, 2.5)]
        elif "str" in a: out += [(k, "no-such-choice"), (k, 3)]
    if "epsilon" in cls.parameter_names(): out += [("epsilon", 0), ("epsilon", -1.0)]
    return out


@pytest.mark.parametrize("name, key, value", [(n, k, v) for n in NAMES for k, v in bad_values(MECHANISMS[n])],
                         ids=lambda x: repr(x) if not isinstance(x, str) else x)
def test_bad_parameters_are_refused_by_name(name, key, value):
    with pytest.raises(ValueError) as e:
        build(name, **{key: value})
    shown = repr(value.item() if isinstance(value, np.generic) else value)
    assert f"{key}={shown}" in str(e.value), str(e.value)
    assert "np." not in str(e.value)


@pytest.mark.parametrize("name", NAMES)
def test_unknown_parameter_is_refused_by_name(name):
    with pytest.raises(ValueError, match=r"colour='red'.*no parameter 'colour' \(known: "):
        build(name, colour="red")


@pytest.mark.parametrize("name", NAMES)
def test_bad_training_data(name, split):
    train, _ = split
    with pytest.raises(ValueError, match="Ratings"): build(name).fit(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="empty"): build(name).fit(train.take(np.zeros(len(train), bool)))


@pytest.mark.parametrize("name", NAMES)
def test_a_tiny_epsilon_never_gives_a_nan_model(name, split):
    "An ε so small that the noise overflows is a ValueError naming a parameter to change, or a finite model; never NaN."
    names = MECHANISMS[name].parameter_names()
    if "epsilon" not in names: pytest.skip(f"{name} has no epsilon")
    train, test = split
    for eps in (1e-300, 1e-320):
        try: fit = build(name, epsilon=eps).fit(train)
        except ValueError as e:
            assert any(f"{k}=" in str(e) for k in names), str(e)
            continue
        assert np.isfinite(fit.U).all() and np.isfinite(fit.V).all() and np.isfinite(fit.predict_codes(test.user, test.item)).all()


# ---------------------------------------------------------------- a new mechanism module, discovered

TEMPLATE = '''"""A throw-away mechanism written by tests/test_mechanisms.py (removed when the test ends)."""
import numpy as np
from dpmf_lit.core.checks import check_int, check_positive
from dpmf_lit.model.mechanism import Factors, Mechanism, PrivacyReport, register_mechanism

@register_mechanism("{name}")
class ThrowAway(Mechanism):
    "Every rating predicted by the training mean plus Laplace noise (a test of the discovery path)."
    test_params = dict(epsilon=2.0)
    overflow_hint = "raise epsilon={{epsilon}}"

    def __init__(self, epsilon: float = 1.0,   # epsilon per rating of the released mean
                 seed: int = 0):                # seed of the Laplace draw
        self.epsilon, self.seed = check_positive("epsilon", epsilon), check_int("seed", seed, 0)

    def _fit(self, train, progress=False):
        scale = (train.rating_max - train.rating_min) / (len(train) * self.epsilon)
        mean = float(train.rating.mean()) + self.rng().laplace(0.0, scale)
        return Factors(U=np.ones((train.n_users, 1)), V=np.full((train.n_items, 1), mean),
                       privacy=PrivacyReport(released=("V",), unit="rating", epsilon=self.epsilon, delta=0.0,
                                             coverage="end-to-end", neighbouring="replace",
                                             method="Laplace mechanism", scope="for the released mean, n public"))
'''


def _git_status(root):
    p = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=root, capture_output=True, text=True)
    return p.stdout.splitlines() if p.returncode == 0 else None


@pytest.mark.slow
def test_a_new_mechanism_module_is_fitted_listed_and_tested(tmp_path):
    "A module added to the package with @register_mechanism is found by the CLI, its help and the tests above."
    pkg = Path(dpmf_lit.__file__).parent
    if not os.access(pkg, os.W_OK): pytest.skip(f"the package folder {pkg} is not writable")
    tag = uuid.uuid4().hex[:8]
    name, module = f"tmp-{tag}", pkg / f"_tmp_mech_{tag}.py"
    root = pkg.parent
    before = _git_status(root)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    dpmf = Path(sys.executable).parent / "dpmf"
    cli = [str(dpmf)] if dpmf.exists() else [sys.executable, "-c", "import sys; from dpmf_lit.cli.main import main; sys.exit(main())"]
    run = lambda args, **kw: subprocess.run(args, capture_output=True, text=True, timeout=600, env=env, **kw)
    try:
        module.write_text(TEMPLATE.format(name=name))
        if before is not None:   # nothing but the new module changed in the clone
            assert sorted(set(_git_status(root)) - set(before)) == [f"?? {module.relative_to(root).as_posix()}"]
        fit = run(cli + ["fit", name, "--dataset", "synthetic:n_users=100,n_items=50,n_ratings=2000", "--json"])
        assert fit.returncode == 0, fit.stderr
        rep = json.loads(fit.stdout)
        assert rep["mechanism"] == name and rep["privacy"]["epsilon"] == 1.0 and "scope: for the released mean" in rep["privacy"]["summary"]
        help_ = run(cli + ["fit", "--help"])
        assert help_.returncode == 0 and f"  {name}: Every rating predicted" in help_.stdout
        assert "epsilon per rating of the released mean" in help_.stdout
        tests = run([sys.executable, "-m", "pytest", __file__, "-v", "-k", name, "-p", "no:cacheprovider"], cwd=root)
        assert tests.returncode == 0, tests.stdout[-3000:]
        for test in ("test_fit_and_predict", "test_same_seed_same_numbers_other_seed_other_numbers", "test_privacy_report",
                     "test_bad_parameters_are_refused_by_name", "test_a_tiny_epsilon_never_gives_a_nan_model"):
            assert f"{test}[{name}" in tests.stdout and "PASSED" in tests.stdout, (test, tests.stdout[-3000:])
    finally:
        module.unlink(missing_ok=True)
        for cached in (pkg / "__pycache__").glob(f"_tmp_mech_{tag}.*"): cached.unlink(missing_ok=True)
    assert before is None or _git_status(root) == before


@pytest.mark.parametrize("name", NAMES)
def test_parameters_speak_the_one_vocabulary(name):
    """Every parameter name is in VOCABULARY (one meaning everywhere); a paper's name is accepted only as a declared
    alias of one of the mechanism's parameters, and never shadows a vocabulary name (which would give it two meanings)."""
    cls = MECHANISMS[name]
    outside = [k for k in cls.parameter_names() if k not in VOCABULARY]
    assert not outside, f"{name}: {outside} are not in dpmf_lit.model.mechanism.VOCABULARY: use its name, or add the new idea there, or declare a paper alias"
    for alias, k in cls.aliases.items():
        assert k in cls.parameter_names() and alias not in VOCABULARY, (name, alias, k)
    for k, (other, values) in cls.applies.items():
        assert k in cls.parameter_names() and other in cls.parameter_names() and values, (name, k, other)


def test_the_vocabulary_has_no_unused_names():
    used = {k for cls in MECHANISMS.values() for k in cls.parameter_names()}
    assert set(VOCABULARY) - used == set(), "names in VOCABULARY that no mechanism declares"


@pytest.mark.parametrize("name", NAMES)
def test_options_are_keyword_only_with_a_short_repr_and_get_set_params(name):
    cls = MECHANISMS[name]
    with pytest.raises(ValueError, match="takes its parameters by keyword only"): cls(1)
    m = build(name)
    assert repr(m).startswith(type(m).__name__ + "(") and len(repr(m)) < 200
    before = m.get_params()
    if "seed" in cls.parameter_names():   # the deterministic baselines have none
        assert m.set_params(seed=5) is m and m.get_params() == {**before, "seed": 5}
        with pytest.raises(ValueError, match="seed=-1"): m.set_params(seed=-1)
        assert m.seed == 5
    assert get_mechanism(cls.__name__) is cls and get_mechanism(cls.name) is cls   # the CLI name from the class and back


@pytest.mark.parametrize("name", NAMES)
def test_validation_data_under_one_keyword_and_predict_by_ids(name, split):
    train, test = split
    fit = build(name).fit(train, valid=test)
    assert fit.valid_rmse is not None and math.isfinite(fit.valid_rmse) and len(repr(fit)) < 160
    with pytest.raises(ValueError, match="valid must be Ratings"): build(name).fit(train, True)
    with pytest.raises(ValueError, match="takes no 'test'; validation data is valid="): build(name).fit(train, test=test)
    # MovieLens-like ids: users 1..n, items 10, 20, ...; predict takes them, predict_codes the 0-based codes
    named = dataclasses.replace(train, user_ids=np.arange(1, train.n_users + 1), item_ids=10 * np.arange(1, train.n_items + 1))
    fit = build(name).fit(named)
    u, i = test.user[:50], test.item[:50]
    np.testing.assert_array_equal(fit.predict(u + 1, 10 * (i + 1)), fit.predict_codes(u, i))
    with pytest.raises(ValueError, match="user id"): fit.predict(0, 10, unknown="error")
    # an id the training data never saw: a default prediction from the released model, flagged (as Surprise's was_impossible)
    with pytest.warns(UserWarning, match="not in the training data"):
        pred, known = fit.predict([0, 1, 1], [10, 5, 10], return_known=True)   # user 0 and item 5 are unknown
    assert known.tolist() == [False, False, True] and np.isfinite(pred).all()
    assert (pred >= train.rating_min).all() and (pred <= train.rating_max).all()
    # the unknown side replaced by the mean of its released rows and biases (zero when not released)
    r, shown = fit.privacy, lambda part: not fit.privacy.private or part in fit.privacy.released
    mu = fit.mean if train.rating_min <= fit.mean <= train.rating_max else (train.rating_min + train.rating_max) / 2
    ubar = fit.U.mean(0) if shown("U") else 0 * fit.U[0]
    want = mu + float(ubar @ fit.V[0]) + (0.0 if fit.user_bias is None else
                                          (fit.user_bias.mean() if shown("user_bias") else 0.0) + fit.item_bias[0])
    assert pred[0] == pytest.approx(np.clip(want, train.rating_min, train.rating_max), abs=1e-4)


@pytest.mark.parametrize("name", NAMES)
def test_a_fitted_model_scores_itself(name, split):
    train, test = split
    fit = build(name).fit(train, valid=test)
    assert fit.rmse(test) == fit.valid_rmse and fit.score(test) == -fit.valid_rmse
    with pytest.raises(ValueError, match="data must be a Ratings object"): fit.rmse(test.rating)


def test_every_fit_shows_a_heartbeat_on_a_terminal(split, heartbeats):
    "`progress=True` (dpmf fit on a terminal): every mechanism's fit runs inside the heartbeat, not only those with a bar of their own."
    seen = heartbeats
    train, _ = split
    for name in NAMES:
        seen.clear()
        build(name).fit(train, progress=True)
        assert seen[:1] == [(f"{name}: fitting", True)], name    # the outer fit's (a fit inside it shows none: see below)


def test_the_heartbeat_counts_seconds_after_its_delay(capsys):
    import time
    from dpmf_lit.model.mechanism import heartbeat
    import re
    def until_said(what: str) -> str:     # waits (up to 20 s) for the thread to speak: no wall-clock time is asserted
        err = ""
        for _ in range(400):
            time.sleep(0.05); err += capsys.readouterr().err
            if what in err: break
        return err
    with heartbeat("slow: fitting", delay=0.05, every=0.05): err = until_said("slow: fitting:")
    err += capsys.readouterr().err       # and the line's erasure, at the end
    assert re.search(r"slow: fitting: \d\d:\d\d elapsed", err), err
    with heartbeat("quick: fitting", delay=5): pass      # a step that ends before the delay prints nothing
    assert capsys.readouterr().err == ""
    with heartbeat("outer", delay=0.05, every=0.05):
        with heartbeat("inner", delay=0.0, every=0.05): err = until_said("outer:")   # a fit inside a fit: one line, the outer one
    err += capsys.readouterr().err
    assert re.search(r"outer: \d\d:\d\d elapsed", err) and "inner" not in err, err


@pytest.mark.parametrize("ids", ["integer", "string"])
@pytest.mark.parametrize("name", ["bias", "dp-bias"])
def test_predict_answers_or_refuses_every_kind_of_id(name, ids, tmp_path):
    "The fuzz: a model fitted on a file with string ids raised AttributeError ('str' object has no attribute 'item') on every refusal."
    from dpmf_lit.data import load_dataset
    uid = (lambda u: f"u{u}") if ids == "string" else (lambda u: 100 + u)
    f = tmp_path / "r.csv"
    f.write_text("user,item,rating\n" + "".join(f"{uid(u)},i{i},{(u * i) % 5 + 1}\n" for u in range(12) for i in range(8)))
    fit = build(name).fit(load_dataset(f, scale=(1, 5)))
    known_u, unknown_u, wrong_kind = uid(3), uid(99), (7 if ids == "string" else "u3")
    p = fit.predict(known_u, "i2")
    assert p.shape == (1,) and 1 <= p[0] <= 5
    np.testing.assert_array_equal(fit.predict([known_u, uid(4)], ["i2", "i5"]), fit.predict_codes(*(np.array(a) for a in (
        [int(np.searchsorted(fit.user_ids, known_u)), int(np.searchsorted(fit.user_ids, uid(4)))], [2, 5]))))
    for empty in ([], np.array([]), np.array([], dtype=object)):                          # nothing asked, nothing predicted
        pred, known = fit.predict(empty, empty, return_known=True)
        assert pred.shape == known.shape == (0,)
    with pytest.raises(ValueError, match=f"user id\\(s\\) {unknown_u!r} not in the training data's users"):
        fit.predict(unknown_u, "i2", unknown="error")
    with pytest.raises(ValueError, match="item id\\(s\\) 'i99' not in the training data's items"):
        fit.predict(known_u, "i99", unknown="error")
    with pytest.warns(UserWarning, match="not in the training data"):
        assert 1 <= fit.predict(unknown_u, "i2")[0] <= 5                                   # a cold start, in the scale
    for bad in (wrong_kind, None, True, b"u3", float("nan"), 2.5, [known_u, None]):
        item = ["i2"] * len(bad) if isinstance(bad, list) else "i2"
        for unknown in ("default", "error"):
            with pytest.raises(ValueError) as e:
                fit.predict(bad, item, unknown=unknown)
            msg = str(e.value)
            assert msg.startswith("user=") and f"its user ids are {ids}s" in msg, msg
            assert str(uid(0)) not in msg and str(uid(11)) not in msg, msg                 # no id of the training data shown
    with pytest.raises(ValueError, match="item=7 holds no item id of this model: its item ids are strings"):
        fit.predict(known_u, 7)
    if ids == "integer": np.testing.assert_array_equal(fit.predict(float(known_u), "i2"), p)   # 103.0 is id 103
