"""No side channel: every number a fit prints (its privacy report, params, history, `dpmf fit --json`) is the same on two
neighbouring data sets, except the released (noised) arrays and what the report's scope declares not covered."""
import dataclasses, json

import numpy as np
import pytest

from dpmf_lit.studies.audit import declared_pair, neighbouring_pair
from dpmf_lit.data import Ratings
from dpmf_lit.model.mechanism import mechanisms
from dpmf_lit.core.privacy import GROUP_CLAUSE, TIME_CLAUSE
from dpmf_lit.data.synthetic import synthetic

GUARANTEED = {"dp-bias", "dp-bias-features", "user-features", "user-mean", "dpals", "dpals-adaptive", "hua", "hua-protocol", "dp-pmf",
              "pdp-pmf", "gauss", "sgld", "xin"}

# What a fit may print that differs between neighbouring_pair, each with the words of the scope that declare it not covered.
# History keys every mechanism may have: the wall time (fit_randomness adds TIME_CLAUSE to every fit's scope).
HISTORY_EXEMPT = {"*": {"seconds": TIME_CLAUSE},
                  "hua": {"train_rmse": "U's training history"},                 # U's non-private MF, per epoch
                  "gauss": {"train_rmse": "training-RMSE history"},
                  "sgld": {"train_rmse": "per-epoch training history"},
                  "dp-pmf": {"lr_capped": "the history's lr_capped"},        # the share of row steps capped: reads U's training
                  "pdp-pmf": {"lr_capped": "the history's lr_capped"}}
# Report fields: the per-user value by group privacy over k, the most ratings any user has (read from the data).
REPORT_EXEMPT = {"epsilon_user": GROUP_CLAUSE, "delta_user": GROUP_CLAUSE, "user_note": GROUP_CLAUSE}
PARAMS_EXEMPT = {"xin": {"weight": "the weight chosen on the public users' held-out ratings", "validation": "validation scores"}}


def guaranteed():
    out = []
    for name, cls in mechanisms().items():
        rep = make(cls).fit(neighbouring_pair("value")[0]).privacy
        if rep.method != "non-private": out.append(name)
    return out


def make(cls):
    return cls(**cls.test_params, **({"seed": 0} if "seed" in cls.parameter_names() else {}))


def test_every_mechanism_with_a_guarantee_is_checked():
    assert GUARANTEED <= set(guaranteed())


def printed(model, name: str) -> dict:
    "What a fit prints, less the declared exemptions (each checked against the report's scope)."
    rep, scope = model.privacy, model.privacy.scope
    blank = {}
    for k, why in REPORT_EXEMPT.items():
        if getattr(rep, k) not in (None, ""):
            assert why in scope, f"{name}: {k} differs between neighbours but the scope does not declare it: {scope}"
            blank[k] = None if k != "user_note" else ""
    rep = dataclasses.replace(rep, **blank)
    hist_ex = {**HISTORY_EXEMPT["*"], **HISTORY_EXEMPT.get(name, {})}
    par_ex = PARAMS_EXEMPT.get(name, {})
    for k, why in {**hist_ex, **par_ex}.items():
        if any(k in h for h in model.history) or k in model.params: assert why in scope, f"{name}: {k}: {why!r} not in {scope!r}"
    return {"str": str(rep), "report": rep.to_dict(), "repr": repr(model).replace(f"{model.fit_seconds:.2f} s", ""),
            "params": {k: v for k, v in model.params.items() if k not in par_ex},
            "history": [{k: v for k, v in h.items() if k not in hist_ex} for h in model.history]}


def same_name(D, D2): return D, dataclasses.replace(D2, name=D.name)


def larger_pairs(unit: str):
    "One user changed: the most active user's ratings all change value; for a per-user guarantee also that user removed."
    R = synthetic(n_users=120, n_items=30, n_ratings=1500, seed=1, n_features=3)
    top = np.bincount(R.user).argmax()
    own = R.user == top
    r = R.rating.copy()
    r[own] = np.where(r[own] > 3, 1.0, 5.0).astype(np.float32)
    pairs = {"user's values": (R, dataclasses.replace(R, rating=r))}
    if unit == "user": pairs["user removed"] = (R, R.take(np.flatnonzero(~own)))
    return pairs


def diff(a: dict, b: dict) -> list:
    return [k for k in a if a[k] != b[k]]


@pytest.mark.parametrize("name", sorted(GUARANTEED))
def test_fit_prints_nothing_data_dependent(name):
    cls = mechanisms()[name]
    rep = make(cls).fit(neighbouring_pair("value")[0]).privacy
    unit = "user" if str(rep.unit).startswith("user") else "rating"
    pairs = {declared_pair(rep): neighbouring_pair(declared_pair(rep)), **larger_pairs(unit)}
    for label, (D, D2) in pairs.items():
        D, D2 = same_name(D, D2)
        a, b = printed(make(cls).fit(D), name), printed(make(cls).fit(D2), name)
        bad = diff(a, b)
        assert not bad, f"{name} on the '{label}' pair prints data-dependent {bad}: " + "; ".join(
            f"{k}: {a[k]!r} vs {b[k]!r}" for k in bad)


def test_dp_bias_does_not_print_how_many_ratings_were_kept():
    "Seven and six ratings, all kept: the report said '7 of 7' and '6 of 6 kept', a certain distinguisher."
    cls = mechanisms()["dp-bias"]
    D, D2 = same_name(*neighbouring_pair("user-absent"))
    a, b = make(cls).fit(D).privacy, make(cls).fit(D2).privacy
    assert a.notes == b.notes and " kept)" not in a.notes and str(a) == str(b)


def _write(path, R):
    with open(path, "w") as f:
        for u, i, r in zip(R.user, R.item, R.rating): f.write(f"{u + 1}\t{i + 1}\t{int(r)}\t0\n")


@pytest.mark.parametrize("name", sorted(GUARANTEED))
def test_cli_json_prints_nothing_data_dependent(name, tmp_path, monkeypatch):
    "`dpmf fit --json` on the declared pair (same file name, same split): only the fields it names as not covered differ."
    from dpmf_lit.cli.main import NOT_COVERED, fit_report
    cls = mechanisms()[name]
    rep = make(cls).fit(neighbouring_pair("value")[0]).privacy
    pair = {"absent": "value", "user-absent": "user"}.get(declared_pair(rep), declared_pair(rep))   # equal sizes: the same split
    out, items = [], tmp_path / "items.csv"                           # the same public item file on both sides
    items.write_text("id,odd\n" + "".join(f"{j + 1},{j % 2}\n" for j in range(neighbouring_pair(pair)[0].n_items)))
    for side, R in zip("ab", neighbouring_pair(pair)):
        (tmp_path / side).mkdir()
        _write(tmp_path / side / "r.data", R)
        monkeypatch.chdir(tmp_path / side)
        out.append(fit_report(name, "r.data", {**cls.test_params, **({"seed": 0} if "seed" in cls.parameter_names() else {})},
                              test_fraction=0.2, item_features=str(items)))
    a, b = out
    assert all(k in NOT_COVERED for k in ("n_train", "n_test", "test metrics", "fit_seconds", "compile_seconds"))
    for k in ("privacy", "parameters"):
        pa, pb = json.loads(json.dumps(a[k])), json.loads(json.dumps(b[k]))
        if k == "privacy":
            for f in REPORT_EXEMPT:
                pa.pop(f), pb.pop(f)
            pa.pop("summary"), pb.pop("summary")   # holds the per-user value; compared whole above, without it
        assert pa == pb, f"{name} --json {k}: {pa} vs {pb}"
    for k in ("mechanism", "dataset", "test_fraction", "seed", "item_features", "not_covered"): assert a[k] == b[k], k


# --- The data a fit takes is checked first: a repeated pair or a rating off the scale breaks every sensitivity bound.

def _bad(kind: str) -> Ratings:
    D = neighbouring_pair("value")[0]
    u, i, r = D.user, D.item, D.rating.copy()
    if kind == "duplicate": u, i, r = np.r_[u, u[:1]], np.r_[i, i[:1]], np.r_[r, r[:1]]
    else: r[0] = 7.0
    return Ratings(u.astype(np.int32), i.astype(np.int32), r.astype(np.float32), D.n_users, D.n_items, D.rating_min,
                   D.rating_max, name="hand-built")

MESSAGES = {"duplicate": r"train='hand-built': duplicate \(user, item\) pair \(user=0, item=0\)",
            "range": r"train='hand-built': rating=7 at index 0 .* outside the declared range \[1, 5\]"}


@pytest.mark.parametrize("kind", sorted(MESSAGES))
@pytest.mark.parametrize("name", sorted(mechanisms()))
def test_fit_refuses_invalid_ratings_before_any_work(name, kind, monkeypatch):
    cls = mechanisms()[name]
    def never(*a, **k): raise AssertionError(f"{name}._fit ran on invalid data")
    monkeypatch.setattr(cls, "_fit", never)
    with pytest.raises(ValueError, match=MESSAGES[kind]): make(cls).fit(_bad(kind))


def test_fit_validates_the_validation_ratings_too():
    D = neighbouring_pair("value")[0]
    with pytest.raises(ValueError, match=r"valid='hand-built': duplicate"): make(mechanisms()["pmf"]).fit(D, valid=_bad("duplicate"))


def test_dp_bias_refuses_a_repeated_pair_that_would_break_its_bound():
    "A user with one pair repeated 50 times would move w by far more than the sensitivity √(2τ) the noise is calibrated to."
    D = neighbouring_pair("value")[0]
    k = np.r_[np.arange(len(D)), np.zeros(50, int)]
    dup = Ratings(D.user[k], D.item[k], D.rating[k], D.n_users, D.n_items, 1.0, 5.0, name="hand-built")
    with pytest.raises(ValueError, match="train='hand-built': duplicate"): mechanisms()["dp-bias"](max_ratings=5, seed=0).fit(dup)


# --- The catalogue and the roster: neighbours built through the loader (MovieLens 100K files with their item file), whose
# item set or roster changes. What a reader sees before any value — the shapes and the id lists — must be the same, or the
# headline must be conditional on the catalogue (the roster, under add/remove).

from dpmf_lit.studies.meter_public import _shapes, loader_pairs


@pytest.fixture(scope="module")
def loader_built(tmp_path_factory):
    return {f: {label: (D, D2) for label, D, D2, _ in loader_pairs(tmp_path_factory.mktemp(f"items-{f}"), 3, 0, item_file=f)}
            for f in (True, False)}


@pytest.mark.parametrize("name", sorted(GUARANTEED))
def test_shapes_and_ids_do_not_depend_on_which_items_are_rated(name, loader_built):
    "The 'moved' pair (an item loses its only rater) and 'more ratings': with the item file, equal shapes and ids and the printed report equal."
    cls = mechanisms()[name]
    for label in ("moved", "more ratings"):
        D, D2 = loader_built[True][label]
        a, b = make(cls).fit(D), make(cls).fit(D2)
        assert _shapes(a) == _shapes(b), f"{name} on '{label}': {_shapes(a)} vs {_shapes(b)}"
        assert a.privacy.coverage == b.privacy.coverage and "catalogue" not in a.privacy.condition, a.privacy.guarantee()
        D, D2 = loader_built[False][label]                                # the catalogue read from the data: a condition
        if make(cls).needs_item_features():                               # and no item feature: refused, nothing released
            with pytest.raises(ValueError, match="needs public item features"): make(cls).fit(D)
            continue
        a, b = make(cls).fit(D), make(cls).fit(D2)
        if _shapes(a) != _shapes(b) and a.privacy.released and a.privacy.private:
            assert a.privacy.guarantee().startswith("if the catalogue of 10 items, read from the data, is public"), a.privacy.guarantee()


@pytest.mark.parametrize("name", sorted(GUARANTEED))
def test_a_removed_user_changes_no_item_side_shape_and_add_remove_headlines_name_the_roster(name, loader_built):
    cls = mechanisms()[name]
    D, D2 = loader_built[True]["removed"]
    a, b = make(cls).fit(D), make(cls).fit(D2)
    for k in ("V", "item_bias", "item_ids"): assert _shapes(a)[k] == _shapes(b)[k], (name, k)
    if "neighbouring" not in cls.parameter_names(): return
    try: mech = cls(**{**cls.test_params, "neighbouring": "add_remove"}, **({"seed": 0} if "seed" in cls.parameter_names() else {}))
    except ValueError: return                                       # no add/remove guarantee to qualify
    rep = mech.fit(D).privacy
    if rep.private and rep.neighbouring == "add_remove":
        assert "if the roster of 8 users, read from the data, is public" in rep.condition, rep.guarantee()


@pytest.mark.parametrize("name", ["dp-bias", "dpals", "dp-bias-features"])
def test_add_remove_on_a_roster_read_from_the_data_is_conditional_on_it(name, loader_built):
    "The mechanisms with an add/remove guarantee: their headline names the roster when the loader read it from the ratings."
    cls = mechanisms()[name]
    rep = cls(**{**cls.test_params, "neighbouring": "add_remove", "seed": 0}).fit(loader_built[True]["removed"][0]).privacy
    assert rep.guarantee().startswith("if the roster of 8 users, read from the data, is public: ("), rep.guarantee()
