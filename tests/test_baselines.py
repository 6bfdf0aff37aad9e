"""The baselines of nbs/09_baselines.ipynb: the reference RMSEs on the command line's split of MovieLens 100K, dp-bias's
report at the target ε, its sensitivity bound on random neighbouring data sets, its two limits, and the command line."""
import math, os, subprocess, sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dpmf_lit.papers.baselines import (Biases, DPBiases, GlobalMean, ItemMean, UserMean, bias_noise, bias_sensitivity, item_totals,
                                keep_per_user)
from dpmf_lit.core.checks import UserError
from dpmf_lit.data import Ratings, random_split
from dpmf_lit.model.mf import evaluate
from dpmf_lit.core.privacy import gaussian_epsilon
from dpmf_lit.model.testing import small_split

# measured by an independent reviewer on random_split(ml-100k, test_fraction=0.2, seed=0)
REFERENCE = {"global-mean": 1.122, "user-mean": 1.035, "item-mean": 1.021, "bias": 0.940}
BIN = Path(sys.executable).parent / "dpmf"


@pytest.fixture(scope="module")
def ml100k():
    "The command line's split of MovieLens 100K, or a skip where the data set is not cached and cannot be fetched."
    from dpmf_lit.data import load_dataset
    try: ratings = load_dataset("ml-100k")
    except (UserError, OSError) as e: pytest.skip(f"ml-100k not available: {e}")
    return random_split(ratings, test_fraction=0.2, seed=0)


@pytest.fixture(scope="module")
def split():
    return small_split()


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_reference_rmse_on_the_cli_split(name, ml100k):
    from dpmf_lit.cli.main import fit_report
    got = fit_report(name, "ml-100k", {}, 0.2, 0)
    assert got["n_test"] == len(ml100k[1]) and abs(got["rmse"] - REFERENCE[name]) <= 0.005, (name, got["rmse"])


def test_fit_report_is_the_notebooks_split(ml100k):
    from dpmf_lit.cli.main import fit_report
    train, test = ml100k
    assert math.isclose(fit_report("dp-bias", "ml-100k", {"epsilon": 1.0, "seed": 0}, 0.2, 0)["rmse"],
                        evaluate(DPBiases(epsilon=1.0, seed=0).fit(train), test)["rmse"], rel_tol=1e-12)


# ---------------------------------------------------------------- dp-bias: the report and the refusals

@pytest.mark.parametrize("neighbouring", ["replace", "add_remove"])
@pytest.mark.parametrize("epsilon", [0.5, 1.0, 4.0])
def test_ask_for_epsilon_get_it(epsilon, neighbouring, split):
    train, _ = split
    rep = DPBiases(epsilon=epsilon, delta=1e-6, neighbouring=neighbouring, seed=0).fit(train).privacy
    assert math.isclose(rep.epsilon, epsilon, rel_tol=1e-9) and rep.delta == 1e-6
    assert rep.coverage == "end-to-end" and rep.unit == "user" and rep.neighbouring == neighbouring
    assert rep.released == ("item_bias",) and rep.randomness == "public" and rep.seed == 0
    z, _ = bias_noise(epsilon, 1e-6, DPBiases.test_params["max_ratings"], neighbouring)
    assert gaussian_epsilon(z, 1e-6) <= epsilon and math.isclose(gaussian_epsilon(z, 1e-6), epsilon, rel_tol=1e-9)
    assert rep.summary().startswith(f"({epsilon:g}, 1e-06)-DP per user, end to end")


@pytest.mark.parametrize("bad, named", [(dict(epsilon=0), "epsilon=0"), (dict(epsilon=-1), "epsilon=-1"),
                                        (dict(delta=1.5), "delta=1.5"), (dict(delta=0), "delta=0"),
                                        (dict(unit="rating"), "unit='rating'"), (dict(unit="household"), "unit='household'"),
                                        (dict(neighbouring="swap"), "neighbouring='swap'"), (dict(max_ratings=0), "max_ratings=0")])
def test_bad_input_is_refused_by_name_before_any_work(bad, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(")):
        DPBiases(**bad)


def test_the_unit_error_says_why():
    with pytest.raises(ValueError, match="per user only"): DPBiases(unit="rating")


def test_a_prior_outside_the_scale_is_refused(split):
    train, _ = split
    for cls in (UserMean, DPBiases):
        with pytest.raises(ValueError, match=r"mean=9\.0 must lie in the rating scale"): cls(mean=9.0).fit(train)


def test_seed_none_is_secret_and_a_seed_reproduces(split):
    train, _ = split
    a, b = DPBiases().fit(train), DPBiases().fit(train)
    assert a.privacy.randomness == "secret" and a.params["seed"] is None and not np.array_equal(a.item_bias, b.item_bias)
    c, d = DPBiases(seed=7).fit(train), DPBiases(seed=7).fit(train)
    np.testing.assert_array_equal(c.item_bias, d.item_bias)
    np.testing.assert_array_equal(c.user_bias, d.user_bias)


# ---------------------------------------------------------------- dp-bias: the sensitivity, on random neighbours

def _with_user(r: Ratings, user: int, items, values) -> Ratings:
    "`r` with `user`'s ratings replaced by (items, values) (none: the user removed)."
    keep = r.user != user
    return Ratings(np.r_[r.user[keep], np.full(len(items), user)].astype(np.int32), np.r_[r.item[keep], items].astype(np.int32),
                   np.r_[r.rating[keep], values].astype(np.float32), r.n_users, r.n_items, r.rating_min, r.rating_max)


def _totals(r: Ratings, m0: float):
    S, C = item_totals(r, m0)
    return S, C, np.r_[S / ((r.rating_max - r.rating_min) / 2), C]


@st.composite
def neighbours(draw):
    "A trimmed data set, a user in it, and that user's replacement ratings (at most tau of them, on a 1-5 or 0.5-5 scale)."
    n_users, n_items, tau = draw(st.integers(2, 8)), draw(st.integers(1, 12)), draw(st.integers(1, 6))
    lo = draw(st.sampled_from([1.0, 0.5]))
    m0 = draw(st.floats(lo, 5.0))
    seed = draw(st.integers(0, 2**32 - 1))
    g = np.random.default_rng(seed)
    users, items = [], []
    for u in range(n_users):
        k = int(g.integers(0, n_items + 1))
        users += [u] * k; items += list(g.choice(n_items, k, replace=False))
    r = Ratings(np.array(users, np.int32), np.array(items, np.int32), g.uniform(lo, 5.0, len(users)).astype(np.float32),
                n_users, n_items, lo, 5.0)
    r = r.take(keep_per_user(r.user, tau, g, item=r.item))
    u, k = int(g.integers(n_users)), int(g.integers(0, min(tau, n_items) + 1))
    extreme = draw(st.booleans())   # ratings at the ends of the scale, where the bound is attained
    values = g.choice([lo, 5.0], k) if extreme else g.uniform(lo, 5.0, k)
    return r, u, g.choice(n_items, k, replace=False), values, tau, m0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(neighbours())
def test_one_user_moves_the_totals_by_at_most_the_derived_bound(case):
    r, u, items, values, tau, m0 = case
    half, root = (r.rating_max - r.rating_min) / 2, math.sqrt(tau)
    other, without = _with_user(r, u, items, values), _with_user(r, u, [], [])
    assert np.bincount(other.user, minlength=r.n_users).max(initial=0) <= tau
    S0, C0, w0 = _totals(without, m0)
    for data in (r, other):                                  # add/remove: each data set against the one without u
        S, C, w = _totals(data, m0)
        assert np.linalg.norm(S - S0) <= half * root + 1e-9 and np.linalg.norm(C - C0) <= root + 1e-9
        assert np.linalg.norm(w - w0) <= bias_sensitivity(tau, "add_remove") + 1e-9
    (S1, C1, w1), (S2, C2, w2) = _totals(r, m0), _totals(other, m0)   # replace: u's ratings swapped
    assert np.linalg.norm(S1 - S2) <= 2 * half * root + 1e-9 and np.linalg.norm(C1 - C2) <= 2 * root + 1e-9
    assert np.linalg.norm(C1 - C2) <= math.sqrt(2 * tau) + 1e-9
    assert np.linalg.norm(w1 - w2) <= bias_sensitivity(tau, "replace") + 1e-9


@pytest.mark.parametrize("tau", [1, 4, 9])
def test_the_bounds_are_attained(tau):
    base = Ratings(np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0, np.float32), 2, 10, 1.0, 5.0)
    high, low = _with_user(base, 0, np.arange(tau), np.full(tau, 5.0)), _with_user(base, 0, np.arange(tau), np.full(tau, 1.0))
    assert math.isclose(np.linalg.norm(_totals(high, 3.0)[2] - _totals(base, 3.0)[2]), bias_sensitivity(tau, "add_remove"))
    assert math.isclose(np.linalg.norm(_totals(high, 3.0)[2] - _totals(low, 3.0)[2]), bias_sensitivity(tau, "replace"))


def test_trimming_keeps_a_uniform_subset_of_each_user():
    user = np.repeat(np.arange(3), [1, 5, 40]).astype(np.int32)
    kept = [keep_per_user(user, 4, np.random.default_rng(s), item=np.arange(len(user))) for s in range(2000)]
    assert all(np.array_equal(np.bincount(user[k], minlength=3), [1, 4, 4]) for k in kept)
    freq = np.bincount(np.concatenate(kept), minlength=len(user))[6:] / 2000     # user 2: each rating kept w.p. 4/40
    assert abs(freq.mean() - 0.1) < 1e-12 and freq.min() > 0.07 and freq.max() < 0.13


# ---------------------------------------------------------------- dp-bias: its two limits on MovieLens

def test_no_noise_is_the_bias_model_on_the_trimmed_data(ml100k):
    train, test = ml100k
    fit = DPBiases(epsilon=1000.0, seed=0).fit(train)
    trimmed = train.take(keep_per_user(train.user, 100, DPBiases(seed=0).rng(1), item=train.item))   # the ratings the release used
    assert abs(evaluate(fit, test)["rmse"] - evaluate(Biases().fit(trimmed), test)["rmse"]) < 0.015


def test_tiny_epsilon_is_no_better_than_releasing_nothing(ml100k):
    train, test = ml100k
    user_mean = evaluate(UserMean().fit(train), test)["rmse"]
    for seed in range(3):
        got = evaluate(DPBiases(epsilon=0.01, seed=seed).fit(train), test)["rmse"]
        assert user_mean - 0.003 <= got <= user_mean + 0.015, (seed, got, user_mean)


def test_dp_bias_sits_between_releasing_nothing_and_the_exact_biases(ml100k):
    train, test = ml100k
    rmse = {cls.name: evaluate(cls().fit(train), test)["rmse"] for cls in (GlobalMean, UserMean, ItemMean, Biases)}
    assert rmse["bias"] < min(rmse["user-mean"], rmse["item-mean"]) < rmse["global-mean"]
    dp = evaluate(DPBiases(epsilon=10.0, seed=0).fit(train), test)["rmse"]
    assert rmse["bias"] < dp < rmse["user-mean"] - 0.02


# ---------------------------------------------------------------- the command line

def _dpmf(*args):
    cmd = [str(BIN)] if BIN.exists() else [sys.executable, "-c", "import sys; from dpmf_lit.cli.main import main; sys.exit(main())"]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=600, env={**os.environ, "MPLBACKEND": "Agg"})


@pytest.mark.parametrize("args, rmse", [(("user-mean",), 1.0356), (("dp-bias", "--set", "epsilon=1", "--set", "seed=0"), 1.0255)])   # 1.0257 before one key stream per user
def test_the_command_line_fits_them(args, rmse, ml100k):
    out = _dpmf("fit", args[0], "--dataset", "ml-100k", *args[1:])
    assert out.returncode == 0, out.stderr
    assert f"{args[0]} on ml-100k: test RMSE {rmse:.4f}" in out.stdout, out.stdout
