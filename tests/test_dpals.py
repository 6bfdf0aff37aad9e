"""DPALS (nbs/10_dpals.ipynb): one user's sensitivity under both neighbouring notions, the calibration against
dp_accounting, the end-to-end report, determinism, and the two limits (no noise: ALS; much noise: no worse than
its centring)."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from dpmf_lit.papers.dpals import DPALS, dpals_sensitivity, noise_multipliers, solve_items
from dpmf_lit.model.mf import evaluate
from dpmf_lit.model.testing import small_split


def contribution(u, x, items, m):
    "One user's terms of w = (u uᵀ, x u) per kept item (Γ_u = Γ_r = 1), flattened over m items."
    w = np.zeros((m, u.size * (u.size + 1)))
    for j, xj in zip(items, x): w[j] = np.r_[np.outer(u, u).ravel(), xj * u]
    return w.ravel()


def in_ball(v, r):
    n = np.linalg.norm(v)
    return v * (r / n) if n > 0 else v


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), tau=st.integers(1, 6), d=st.integers(1, 4))
def test_replace_and_add_remove_never_exceed_the_derived_sensitivity(seed, tau, d):
    rng = np.random.default_rng(seed)
    m = 2 * tau + 2
    u, v = (in_ball(rng.normal(size=d), rng.random()) for _ in range(2))
    k1, k2 = rng.choice(m, tau, replace=False), rng.choice(m, tau, replace=False)
    a, b = contribution(u, rng.uniform(-1, 1, tau), k1, m), contribution(v, rng.uniform(-1, 1, tau), k2, m)
    assert np.linalg.norm(a - b) <= dpals_sensitivity(tau, "replace") + 1e-9
    assert np.linalg.norm(a) <= dpals_sensitivity(tau, "add_remove") + 1e-9


@pytest.mark.parametrize("tau", [1, 7, 100])
def test_the_replace_bound_is_attained(tau):
    u, v = np.array([1.0, 0.0]), np.array([0.5, math.sqrt(0.75)])
    gap = np.linalg.norm(contribution(u, np.ones(tau), range(tau), tau) - contribution(v, -np.ones(tau), range(tau), tau))
    assert math.isclose(gap, dpals_sensitivity(tau, "replace"))
    assert math.isclose(np.linalg.norm(contribution(u, np.ones(tau), range(tau), tau)), dpals_sensitivity(tau, "add_remove"))


@pytest.mark.parametrize("epsilon,rounds,share", [(0.3, 1, 0.2), (1.0, 3, 0.5), (8.0, 2, 0.8)])
def test_the_releases_compose_to_the_target_by_dp_accountings_pld(epsilon, rounds, share):
    from dp_accounting.pld import privacy_loss_distribution as pld
    z0, z = noise_multipliers(epsilon, 1e-5, rounds, share)
    total = pld.from_gaussian_mechanism(z0, value_discretization_interval=1e-4).compose(
        pld.from_gaussian_mechanism(z, value_discretization_interval=1e-4).self_compose(rounds))
    assert abs(total.get_epsilon_for_delta(1e-5) - epsilon) <= 2e-3 * max(1.0, epsilon)
    assert math.isclose(z0 ** -2 + rounds * z ** -2, (z0 ** -2) / share, rel_tol=1e-12)


def test_the_report_is_end_to_end_per_user_and_the_fit_is_seeded():
    train, test = small_split()
    a, b = DPALS(epsilon=0.7, d=3, seed=5).fit(train), DPALS(epsilon=0.7, d=3, seed=5).fit(train)
    assert np.array_equal(a.V, b.V) and np.array_equal(a.U, b.U)
    rep = a.privacy
    assert (rep.coverage, rep.unit, rep.neighbouring, rep.randomness) == ("end-to-end", "user", "replace", "public")
    assert math.isclose(rep.epsilon, 0.7) and rep.delta == 1e-5
    assert DPALS(epsilon=0.7, d=3, seed=6).fit(train).V.tolist() != a.V.tolist()
    assert DPALS(d=3).fit(train).privacy.randomness == "secret"


def test_without_noise_dpals_learns_and_with_a_huge_ridge_it_is_its_centring():
    train, test = small_split()
    quiet = DPALS(epsilon=1e8, d=4, reg=1.0, reg_local=1.0, max_norm=2.0, epochs=10, seed=0).fit(train)
    shrunk = DPALS(epsilon=0.5, d=4, reg=1e12, seed=0).fit(train)
    assert np.abs(shrunk.V).max() < 1e-6                      # the factors vanish: offsets and each user's bias remain
    assert evaluate(quiet, test)["rmse"] < evaluate(shrunk, test)["rmse"] - 0.2


def test_the_solve_never_divides_by_less_than_the_ridge():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(50, 4, 4)); A = A + np.swapaxes(A, 1, 2)      # indefinite
    beta = rng.normal(size=(50, 4))
    v = solve_items(A, beta, 2.0)
    assert (np.linalg.norm(v, axis=1) <= np.linalg.norm(beta, axis=1) / 2.0 + 1e-12).all()


@pytest.mark.parametrize("kw,match", [({"count_share": 0.0}, "count_share"), ({"epochs": 0}, "epochs"),
                                      ({"max_norm": -1}, "max_norm"), ({"unit": "rating"}, "unit='rating'")])
def test_bad_input_is_refused_by_name(kw, match):
    with pytest.raises(ValueError, match=match): DPALS(**kw)


def test_a_repeated_pair_is_refused_before_it_can_break_the_sensitivity():
    from dpmf_lit.data import Ratings
    twice = Ratings(np.zeros(3, np.int32), np.zeros(3, np.int32), np.full(3, 4.0, np.float32), 1, 1, 1.0, 5.0, "twice")
    with pytest.raises(ValueError, match="duplicate"): DPALS(seed=0).fit(twice)
    with pytest.raises(ValueError, match="reg="): DPALS(reg=0)


def test_the_report_says_joint_dp_and_what_the_model_holds_that_is_not_covered():
    train, _ = small_split()
    scope = DPALS(d=2, seed=0).fit(train).privacy.scope
    assert scope.startswith("joint DP") and "U and user_bias" in scope and "catalogue" in scope
