"""Adaptive per-item budgets (nbs/10b_dpals_adaptive): the weights spend exactly the budget, the weighted statistics are the
weighted sums they claim, the sensitivity is attained and never exceeded through the package's code path, and the
mechanism meets its target end to end."""
import math
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from dpmf_lit.data.synthetic import synthetic
from dpmf_lit.model.linalg import clip_rows
from dpmf_lit.papers.dpals import DPALS, dpals_sensitivity, item_statistics
from dpmf_lit.papers.dpals_adaptive import AdaptiveDPALS, adaptive_weights
from dpmf_lit.studies.meter import METER, read_meter
from dpmf_lit.studies.meter_others import problems
from dpmf_lit.studies.mutants import MUTANTS, mutated


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.floats(-2.0, 0.0), st.integers(1, 50))
def test_every_user_spends_exactly_the_budget(seed, mu, tau):
    rng = np.random.default_rng(seed)
    n_users, n_items, n = 7, 9, 40
    user, item = rng.integers(0, n_users, n), rng.integers(0, n_items, n)
    counts = rng.normal(5, 4, n_items)                       # noisy counts, some below 1
    w = adaptive_weights(user, item, counts, n_users, tau, mu)
    spent = np.bincount(user, w ** 2, n_users)
    np.testing.assert_allclose(spent[np.bincount(user, minlength=n_users) > 0], tau, rtol=1e-12)
    # the rarer of two items a user rated never weighs less (μ ≤ 0)
    c = np.maximum(counts, 1.0)[item]
    for u in range(n_users):
        k = np.flatnonzero(user == u)
        if len(k) > 1: assert np.all(np.diff(w[k][np.argsort(-c[k], kind="stable")]) >= -1e-12)


def test_weighted_statistics_are_the_weighted_sums():
    rng = np.random.default_rng(0)
    ptr = np.array([0, 3, 5, 9]); users = rng.integers(0, 4, 9); x = rng.uniform(1, 5, 9); w = rng.uniform(0.1, 2, 9)
    U = rng.normal(size=(4, 3))
    A, b = item_statistics(ptr, users, x, U, m0=3.0, clip=1.5, weights=w)
    for j in range(3):
        k = np.arange(ptr[j], ptr[j + 1])
        r = np.clip(x[k] - 3.0, -1.5, 1.5)
        np.testing.assert_allclose(A[j], (w[k, None, None] * U[users[k], :, None] * U[users[k], None, :]).sum(0), rtol=1e-12)
        np.testing.assert_allclose(b[j], ((w[k] * r)[:, None] * U[users[k]]).sum(0), rtol=1e-12)


def test_with_unit_weights_the_statistics_are_bit_identical_to_none():
    rng = np.random.default_rng(1)
    ptr = np.array([0, 4, 6, 10]); users = rng.integers(0, 5, 10).astype(np.int32); x = rng.uniform(1, 5, 10)
    U = rng.normal(size=(5, 2))
    for got, want in zip(item_statistics(ptr, users, x, U, 3.0, clip=1.0, weights=np.ones(10)), item_statistics(ptr, users, x, U, 3.0, clip=1.0)):
        assert np.array_equal(got, want)


@pytest.mark.parametrize("neighbouring", ["add_remove", "replace"])
def test_the_sensitivity_holds_on_random_pairs_through_the_code_path(neighbouring):
    "300 random neighbouring users (rows, ratings, items, weights recomputed for each version): never above Δ; removal at the bounds attains it."
    rng, tau, Gu, Gr, worst = np.random.default_rng(2), 5, 0.5, 2.0, 0.0
    counts = rng.uniform(1, 50, 8)
    base_u, base_i = rng.integers(1, 6, 30), rng.integers(0, 8, 30)             # the other users, fixed
    base_x, U_other = rng.uniform(1, 5, 30), rng.normal(size=(6, 2))
    def w_of(items, x, row):
        user = np.r_[base_u, np.zeros(len(items), int)]; item = np.r_[base_i, items]; xs = np.r_[base_x, x]
        wt = adaptive_weights(user, item, counts, 6, tau, -0.7)
        order = np.argsort(item, kind="stable"); ptr = np.r_[0, np.cumsum(np.bincount(item, minlength=8))]
        U = np.r_[row[None], U_other[1:]]
        A, b = item_statistics(ptr, user[order], xs[order], clip_rows(U, Gu), m0=3.0, clip=Gr, weights=wt[order])
        return np.r_[A.ravel() / Gu ** 2, b.ravel() / (Gu * Gr)]
    for _ in range(300):
        k1, k2 = rng.integers(1, 7, 2)
        i1, i2 = rng.choice(8, k1, replace=False), rng.choice(8, k2, replace=False)
        x1, x2 = rng.choice([-9.0, 9.0], k1), rng.choice([-9.0, 9.0], k2)
        r1, r2 = rng.normal(size=2) * 3, rng.normal(size=2) * 3
        a = w_of(i1, x1, r1)
        b = w_of(np.array([], int), np.array([]), np.zeros(2)) if neighbouring == "add_remove" else w_of(i2, x2, r2)
        worst = max(worst, np.linalg.norm(a - b) / dpals_sensitivity(tau, neighbouring))
    assert worst <= 1 + 1e-9, worst
    if neighbouring == "add_remove": assert worst > 1 - 1e-9, worst     # every removal of a user at the clips attains it
    else: assert worst > 0.8, worst


def test_the_meter_reads_the_claim_attained_never_exceeded():
    shares = []
    for params in METER["dpals-adaptive"]:
        r = read_meter("dpals-adaptive", params)
        assert not r.problems, r.problems
        shares.append(r.measured_mu / r.claimed_mu)
    assert max(shares) == pytest.approx(1.0, abs=1e-6) and min(shares) > 0.8, shares


def test_the_fit_meets_its_target_and_reports_dpals_scope():
    r = synthetic(n_users=200, n_items=60, n_ratings=4000, seed=0)
    m = AdaptiveDPALS(epsilon=2.0, d=3, max_ratings=10, seed=0).fit(r)
    assert m.privacy.epsilon == pytest.approx(2.0, rel=1e-6)
    assert m.privacy.scope == DPALS(epsilon=2.0, d=3, max_ratings=10, seed=0).fit(r).privacy.scope


def test_same_seed_same_numbers_and_bad_input_named():
    r = synthetic(n_users=100, n_items=40, n_ratings=2000, seed=1)
    a, b = (AdaptiveDPALS(d=2, max_ratings=5, seed=3).fit(r) for _ in range(2))
    assert np.array_equal(a.V, b.V)
    with pytest.raises(ValueError, match="weight_exponent"): AdaptiveDPALS(weight_exponent=0.1)


@pytest.mark.parametrize("mutant", [m for m in MUTANTS if m.mechanism == "dpals-adaptive"], ids=lambda m: m.what)
def test_each_adaptive_mutant_is_killed_by_the_adaptive_meter_itself(mutant):
    "Not only by DPALS's meter (the mutants of the shared code would be): the adaptive fit's own readings find it."
    with mutated(mutant): found = problems(names=["dpals-adaptive"], first=True)["dpals-adaptive"]
    assert found, mutant.what
