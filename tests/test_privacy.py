"""Tests of dpmf_lit.core.privacy: samplers against their target distributions (with a wrong-scale control that
must be rejected), calibrations and accountants against exact formulas and Google's dp_accounting,
the one-posterior-sample theorem on exact toy models (dpmf_lit.papers.sgld; its own tests: tests/test_sgld_proof.py) (personalized sampling: tests/test_pdp.py), and input checks."""
import math

import numpy as np
import pytest
from scipy import stats

import dp_accounting
from dp_accounting.pld import pld_privacy_accountant
from dpmf_lit.data import Ratings
from dpmf_lit.model.mf import PrivacyReport
from dpmf_lit.core import privacy as P
from dpmf_lit.papers import sgld as S   # one posterior sample lives with its paper (the SGLD notebook)
from dpmf_lit.papers.gauss import mugdho_imtiaz_epsilon   # the closed form lives with its paper (nbs/06_gaussian_mf)

N = 100_000          # draws per statistical test
from dpmf_lit.core.stats import ACCEPT, REJECT, independence_p, ks_p


# ---------------------------------------------------------------- scalar samplers
@pytest.mark.parametrize("sigma", [0.3, 2.0])
def test_gaussian_noise_matches_normal_and_rejects_half_scale(sigma):
    x = P.gaussian_noise(N, sigma, seed=11)
    assert x.dtype == np.float32 and x.shape == (N,)
    assert ks_p(x, stats.norm(scale=sigma).cdf) > ACCEPT
    assert ks_p(P.gaussian_noise(N, sigma / 2, seed=11), stats.norm(scale=sigma).cdf) < REJECT
    # finer: the variance is right to 5 standard errors (sd of var/sigma^2 is sqrt(2/N) ~ 0.45%), so a scale
    # error of ~1.2% or more fails here, where KS at this N only sees errors of ~3%
    assert abs(np.mean(x.astype(np.float64) ** 2) / sigma ** 2 - 1) < 5 * math.sqrt(2 / N)
    x_off = P.gaussian_noise(N, sigma * 1.02, seed=11)
    assert abs(np.mean(x_off.astype(np.float64) ** 2) / sigma ** 2 - 1) > 5 * math.sqrt(2 / N)


@pytest.mark.parametrize("scale", [0.5, 3.0])
def test_laplace_noise_matches_laplace_and_rejects_half_scale(scale):
    x = P.laplace_noise(N, scale, seed=12, dtype=np.float64)
    assert ks_p(x, stats.laplace(scale=scale).cdf) > ACCEPT
    assert ks_p(P.laplace_noise(N, scale / 2, seed=12), stats.laplace(scale=scale).cdf) < REJECT
    # E|x| = scale with sd scale/sqrt(N): the scale is right to 5 standard errors (~1.6%)
    assert abs(np.abs(x).mean() / scale - 1) < 5 / math.sqrt(N)
    assert abs(np.abs(P.laplace_noise(N, scale * 1.03, seed=12, dtype=np.float64)).mean() / scale - 1) > 5 / math.sqrt(N)
    # the sign is fair and independent of the magnitude
    assert stats.binomtest(int((x > 0).sum()), N).pvalue > ACCEPT
    assert independence_p(np.abs(x), (x > 0).astype(float) + 0.5 * np.random.default_rng(0).random(N), bins=2) > ACCEPT


def test_samplers_are_deterministic_and_advance_a_generator():
    assert np.array_equal(P.gaussian_noise((3, 4), 1.0, seed=5), P.gaussian_noise((3, 4), 1.0, seed=5))
    assert not np.array_equal(P.laplace_noise(10, 1.0, seed=5), P.laplace_noise(10, 1.0, seed=6))
    g = np.random.default_rng(9)
    a, b = P.gaussian_noise(10, 1.0, seed=g), P.gaussian_noise(10, 1.0, seed=g)
    assert not np.array_equal(a, b)
    assert P.gaussian_noise((2, 0), 1.0).shape == (2, 0)
    # numba's Generator reproduces numpy's own ziggurat: bit-identical to Generator.standard_normal
    assert np.array_equal(P.gaussian_noise(10_000, 1.0, seed=7, dtype=np.float64), np.random.default_rng(7).standard_normal(10_000))


def test_mechanisms_add_noise_of_the_calibrated_scale():
    v = np.zeros(N)
    lap = P.laplace_mechanism(v, l1_sensitivity=2.0, epsilon=0.5, seed=1)
    assert ks_p(lap, stats.laplace(scale=4.0).cdf) > ACCEPT
    assert ks_p(lap, stats.laplace(scale=8.0).cdf) < REJECT
    sig = P.gaussian_sigma_analytic(1.0, 1e-5, 3.0)
    gau = P.gaussian_mechanism(v, 3.0, 1.0, 1e-5, seed=2)
    assert ks_p(gau, stats.norm(scale=sig).cdf) > ACCEPT
    assert ks_p(gau, stats.norm(scale=2 * sig).cdf) < REJECT
    cls = P.gaussian_mechanism(v, 3.0, 0.5, 1e-5, seed=3, calibration="classic")
    assert ks_p(cls, stats.norm(scale=P.gaussian_sigma_classic(0.5, 1e-5, 3.0)).cdf) > ACCEPT


# ---------------------------------------------------------------- L2-Laplace
@pytest.mark.parametrize("d", [2, 3, 10])
def test_l2_laplace_radius_is_gamma_and_half_scale_rejected(d):
    eta = P.l2_laplace_noise(N, d, 1.7, seed=21)
    r = np.linalg.norm(eta, axis=1)
    assert ks_p(r, stats.gamma(d, scale=1.7).cdf) > ACCEPT
    r_half = np.linalg.norm(P.l2_laplace_noise(N, d, 1.7 / 2, seed=21), axis=1)
    assert ks_p(r_half, stats.gamma(d, scale=1.7).cdf) < REJECT


@pytest.mark.parametrize("d", [3, 10])
def test_l2_laplace_direction_is_uniform_and_independent_of_radius(d):
    eta = P.l2_laplace_noise(N, d, 1.0, seed=22)
    r = np.linalg.norm(eta, axis=1)
    u = eta / r[:, None]
    marginal = stats.beta((d - 1) / 2, (d - 1) / 2).cdf   # (u_k + 1)/2 for u uniform on the sphere
    for k in (0, d - 1):
        assert ks_p((u[:, k] + 1) / 2, marginal) > ACCEPT
    w = np.random.default_rng(1).standard_normal(d); w /= np.linalg.norm(w)
    assert ks_p((u @ w + 1) / 2, marginal) > ACCEPT         # any fixed direction, not just the axes
    assert independence_p(r, u[:, 0]) > ACCEPT
    # a wrong direction sampler (normalised uniform cube) is rejected by the same test
    c = np.random.default_rng(2).uniform(-1, 1, (N, d)); c /= np.linalg.norm(c, axis=1, keepdims=True)
    assert ks_p((c[:, 0] + 1) / 2, marginal) < REJECT


def test_l2_laplace_in_one_dimension_is_laplace():
    assert ks_p(P.l2_laplace_noise(N, 1, 2.0, seed=23), stats.laplace(scale=2.0).cdf) > ACCEPT


# ---------------------------------------------------------------- Gaussian calibration
@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("delta", [1e-10, 1e-5, 1e-2])
def test_analytic_sigma_is_exactly_calibrated(eps, delta):
    s = P.gaussian_sigma_analytic(eps, delta)
    assert P.gaussian_delta(s, eps) <= delta
    assert P.gaussian_delta(s * (1 - 1e-6), eps) > delta            # smallest valid sigma
    assert math.isclose(P.gaussian_sigma_analytic(eps, delta, 2.5), 2.5 * s, rel_tol=1e-9)
    if eps < 1: assert s < P.gaussian_sigma_classic(eps, delta)
    assert math.isclose(P.gaussian_epsilon(s, delta), eps, rel_tol=1e-8)


def test_analytic_sigma_agrees_with_dp_accounting_pld():
    for eps, delta in [(0.3, 1e-5), (2.0, 1e-6)]:
        s = P.gaussian_sigma_analytic(eps, delta)
        acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-5)
        assert abs(acc.compose(dp_accounting.GaussianDpEvent(s)).get_epsilon(delta) - eps) < 1e-3


def test_classic_formula_is_not_private_for_large_epsilon():
    "Why gaussian_sigma_classic refuses eps >= 1: at eps = 16, delta = 1e-5 the formula's sigma is too small."
    eps, delta = 16.0, 1e-5
    sc = math.sqrt(2 * math.log(1.25 / delta)) / eps
    assert P.gaussian_delta(sc, eps) > 10 * delta
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    assert acc.compose(dp_accounting.GaussianDpEvent(sc)).get_epsilon(delta) > eps + 1    # independent: dp_accounting
    assert P.gaussian_sigma_analytic(eps, delta) > sc


def test_classic_sigma_formula_and_refusal():
    assert math.isclose(P.gaussian_sigma_classic(0.5, 1e-5, 2.0), 2.0 * math.sqrt(2 * math.log(1.25e5)) / 0.5)
    with pytest.raises(ValueError, match=r"epsilon=1.*gaussian_sigma_analytic"):
        P.gaussian_sigma_classic(1.0, 1e-5)


# ---------------------------------------------------------------- accounting
@pytest.mark.parametrize("J", [1, 50, 300, 5000])
@pytest.mark.parametrize("eps_i", [0.1, 0.5, 0.9])
def test_closed_form_equals_classic_conversion_optimum(J, eps_i):
    z = P.classic_noise_multiplier(eps_i, 0.01)
    closed = mugdho_imtiaz_epsilon(J, eps_i, 0.01, 1e-5)
    opt, alpha = P.gaussian_epsilon_classic_optimum(z, J, 1e-5)
    assert math.isclose(closed, opt, rel_tol=1e-8)
    rho = J * eps_i ** 2 / (4 * math.log(125))
    assert math.isclose(alpha, 1 + math.sqrt(math.log(1e5) / rho), rel_tol=1e-5)     # Mugdho & Imtiaz, Eq. 8
    assert P.gaussian_epsilon_rdp(z, J, 1e-5, "classic") >= closed * (1 - 1e-12)    # a grid can only be worse


def _dp_accounting_rdp(event, delta):
    "dp_accounting's RdpAccountant called directly (not through dpmf_lit's wrapper)."
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(event)
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("z,J,delta", [(0.8, 1, 1e-5), (1.1, 20, 1e-6), (6.2, 300, 1e-5), (31.1, 300, 1e-5), (30.0, 10_000, 1e-3),
                                       (1e5, 1, 1e-5)])   # the last: delta covers the TV distance, epsilon = 0
def test_improved_conversion_matches_dp_accounting_rdp_and_pld_is_tighter(z, J, delta):
    ours = P.gaussian_epsilon_rdp(z, J, delta)
    theirs = _dp_accounting_rdp(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), J), delta)
    assert math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=1e-12)
    assert P.dp_accounting_rdp_epsilon(z, J, delta) == theirs             # the exported wrapper is a thin call
    assert ours <= P.gaussian_epsilon_rdp(z, J, delta, "classic")
    pld = P.dp_accounting_pld_epsilon(z, J, delta)
    exact = P.gaussian_epsilon_exact(z, J, delta)
    assert pld <= ours + 1e-9
    assert abs(pld - exact) <= 2e-3 * max(1.0, exact)


def test_laplace_rdp_matches_dp_accounting():
    eps = 0.7
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(1 / eps), 20))
    ours = P.rdp_to_dp(P.laplace_rdp(eps, 20), 1e-6)[0]
    assert math.isclose(ours, acc.get_epsilon(1e-6), rel_tol=1e-9)
    assert ours < 20 * eps


def test_pure_dp_rdp_bound_is_valid_for_laplace():
    "min(eps, alpha eps^2/2) must upper-bound the exact Laplace RDP (which is eps-DP)."
    for eps in (0.1, 1.0, 3.0):
        assert np.all(P.laplace_rdp(eps) <= P.pure_dp_rdp(eps) + 1e-12)


# ---------------------------------------------------------------- accountant
def test_accountant_matches_dp_accounting_and_builds_a_report():
    z = P.classic_noise_multiplier(0.5, 0.01)
    acc = P.PrivacyAccountant(unit="rating", neighbouring="replace", released=("U",))
    for _ in range(100): acc.gaussian(z)
    rep = acc.report(delta=1e-5)
    assert isinstance(rep, PrivacyReport) and rep.private and rep.released == ("U",) and rep.unit == "rating"
    assert math.isclose(rep.epsilon, P.dp_accounting_rdp_epsilon(z, 100, 1e-5), rel_tol=1e-9)
    pld = acc.report(delta=1e-5, method="pld")
    assert pld.epsilon < rep.epsilon and abs(pld.epsilon - P.gaussian_epsilon_exact(z, 100, 1e-5)) < 2e-3
    assert "neighbouring=replace" in rep.notes


def test_accountant_pure_and_mixed_composition():
    a = P.PrivacyAccountant(released=("V",)).pure(0.1, count=3).laplace(0.2)
    eps, delta, how = a.epsilon()
    assert math.isclose(eps, 0.5) and delta == 0.0 and "pure" in how
    b = P.PrivacyAccountant(released=("U",)).gaussian(2.0, count=10)
    ab = a + b
    assert ab.released == ("V", "U") and len(ab.events) == 3
    e_rdp = ab.epsilon(1e-5, "rdp")[0]
    expected = P.rdp_to_dp(P.pure_dp_rdp(0.1, 3) + P.laplace_rdp(0.2) + P.gaussian_rdp(2.0, 10), 1e-5)[0]
    assert math.isclose(e_rdp, expected, rel_tol=1e-12)
    assert ab.epsilon(1e-5, "pld")[0] <= e_rdp + 1e-9
    with pytest.raises(ValueError, match="method='pure'"): ab.epsilon(1e-5, "pure")
    with pytest.raises(ValueError, match="cannot compose"): a + P.PrivacyAccountant(unit="user")
    assert P.PrivacyAccountant().report().epsilon == 0.0


# ---------------------------------------------------------------- one posterior sample
def _posterior(log_prior, loglik_rows):
    lp = log_prior + loglik_rows.sum(axis=0)
    return lp - np.logaddexp.reduce(lp)


def test_ops_bounds_hold_on_random_discrete_models():
    rng = np.random.default_rng(7)
    B = 0.3
    for _ in range(200):
        m, n = 40, 5
        log_prior = np.log(rng.dirichlet(np.full(m, 0.3)) + 1e-300)
        L = rng.uniform(-B, B, (n, m))
        x_new = rng.uniform(-B, B, m)
        base = _posterior(log_prior, L)
        replaced = _posterior(log_prior, np.vstack([L[:-1], x_new]))
        added = _posterior(log_prior, np.vstack([L, x_new]))
        assert np.abs(base - replaced).max() <= S.ops_epsilon(B, "replace") + 1e-12
        assert np.abs(base - added).max() <= S.ops_epsilon(B, "add_remove") + 1e-12


def test_ops_bounds_are_tight():
    "Two parameter values, prior mass p -> 0 on the one the record favours: the log ratio -> 4B (2B)."
    B, p = 0.5, 1e-12
    log_prior = np.log([p, 1 - p])
    x, x2 = np.array([[B, -B]]), np.array([[-B, B]])
    r = _posterior(log_prior, x)[0] - _posterior(log_prior, x2)[0]
    a = _posterior(log_prior, x)[0] - _posterior(log_prior, np.zeros((0, 2)))[0]
    b = _posterior(log_prior, np.zeros((0, 2)))[0] - _posterior(log_prior, x2)[0]
    assert 4 * B - 1e-6 < r <= 4 * B and 2 * B - 1e-6 < max(a, b) <= 2 * B


def test_ops_temperature_and_user_weights():
    assert S.ops_epsilon(0.25) == 1.0 and S.ops_epsilon(0.25, "add_remove") == 0.5
    assert math.isclose(S.ops_likelihood_scale(1.0, B=2.0), 1 / 8)
    assert math.isclose(S.ops_likelihood_scale(1.0, 2.0, "add_remove"), 0.25)
    np.testing.assert_allclose(S.personalized_user_epsilon([0, 0.5, 1], 2.0), [0, 1, 2])


def test_tempered_weighted_posterior_gives_each_user_w_times_epsilon():
    """Exact posteriors on a discrete parameter space: likelihood powered by gamma = ops_likelihood_scale(eps, B) and
    by per-user weights w_i; replacing user i's record moves the log posterior by at most w_i * eps, and the
    two-point worst case reaches it."""
    B, eps = 0.4, 1.0
    g = S.ops_likelihood_scale(eps, B)                      # replace-one
    w = np.array([1.0, 0.5, 0.25, 0.0])
    per_user = S.personalized_user_epsilon(w, eps)
    rng = np.random.default_rng(8)
    worst = np.zeros(len(w))
    for _ in range(100):
        m = 30
        log_prior = np.log(rng.dirichlet(np.full(m, 0.3)) + 1e-300)
        L = rng.uniform(-B, B, (len(w), m))
        for i in range(len(w)):
            L2 = L.copy(); L2[i] = rng.uniform(-B, B, m)
            r = np.abs(_posterior(log_prior, g * w[:, None] * L) - _posterior(log_prior, g * w[:, None] * L2)).max()
            assert r <= per_user[i] + 1e-12
            worst[i] = max(worst[i], r)
    assert worst[-1] == 0.0                                  # weight 0: the user's data has no influence
    log_prior = np.log([1e-12, 1 - 1e-12])                   # tight case: record favours the improbable point
    for i in range(len(w)):
        L = np.zeros((len(w), 2)); L2 = L.copy(); L[i] = [B, -B]; L2[i] = [-B, B]
        r = _posterior(log_prior, g * w[:, None] * L)[0] - _posterior(log_prior, g * w[:, None] * L2)[0]
        assert per_user[i] - 1e-6 <= r <= per_user[i] + 1e-12


# ---------------------------------------------------------------- bad input
BAD = [
    (lambda: P.gaussian_noise(10, -1.0), "sigma=-1.0"),
    (lambda: P.laplace_noise(10, 0), "scale=0"),
    (lambda: P.gaussian_noise(10, 1.0, seed=-3), "seed=-3"),
    (lambda: P.laplace_noise(10, 1.0, seed="abc"), "seed='abc'"),
    (lambda: P.gaussian_sigma_analytic(0, 1e-5), "epsilon=0"),
    (lambda: P.gaussian_sigma_analytic(-1, 1e-5), "epsilon=-1"),
    (lambda: P.gaussian_sigma_analytic(1, 0), "delta=0"),
    (lambda: P.gaussian_sigma_analytic(1, 1), "delta=1"),
    (lambda: P.gaussian_sigma_analytic(1, 1e-5, sensitivity=0), "sensitivity=0"),
    (lambda: P.gaussian_sigma_classic(0.5, 2.0), "delta=2.0"),
    (lambda: P.gaussian_mechanism(np.zeros(3), 1.0, 0.5, 1e-5, calibration="magic"), "calibration='magic'"),
    (lambda: P.laplace_mechanism(np.zeros(3), -2.0, 1.0), "l1_sensitivity=-2.0"),
    (lambda: P.l2_laplace_noise(10, 0, 1.0), "d=0"),
    (lambda: P.l2_laplace_noise(10, 3, -1.0), "scale=-1.0"),
    (lambda: P.gaussian_delta(1.0, -0.5), "epsilon=-0.5"),
    (lambda: P.gaussian_delta(1.0, "x"), "epsilon='x'"),
    (lambda: P.gaussian_epsilon(1.0, 0.0), "delta=0.0"),
    (lambda: P.gaussian_mechanism(np.zeros(3), 1.0, 2.0, 1e-5, calibration="classic"), "epsilon=2.0 >= 1"),
    (lambda: P.l2_laplace_noise(-1, 3, 1.0), "n=-1"),
    (lambda: P.gaussian_rdp(0.0), "noise_multiplier=0.0"),
    (lambda: P.gaussian_rdp(1.0, orders=[0.5, 2]), "orders"),
    (lambda: P.rdp_to_dp(np.zeros(3), 1e-5, orders=[2, 3]), "shape"),
    (lambda: P.rdp_to_dp(np.zeros(2), 1e-5, orders=[2, 3], conversion="best"), "conversion='best'"),
    (lambda: mugdho_imtiaz_epsilon(0, 0.5, 0.01, 1e-5), "J=0"),
    (lambda: mugdho_imtiaz_epsilon(10, 0.5, 0.01, 1.5), "delta_r=1.5"),
    (lambda: S.ops_epsilon(-1.0), "B=-1.0"),
    (lambda: S.ops_epsilon(1.0, "swap"), "neighbouring='swap'"),
    (lambda: S.personalized_user_epsilon([1, -0.5], 1.0), "weights[1]=-0.5"),
    (lambda: P.PrivacyAccountant(neighbouring="swap"), "neighbouring='swap'"),
    (lambda: P.PrivacyAccountant().gaussian(-1.0), "noise_multiplier=-1.0"),
    (lambda: P.PrivacyAccountant().gaussian(1.0).report(delta=0), "delta=0"),
    (lambda: P.PrivacyAccountant().report(method="magic"), "method='magic'"),
    # numbers typed as text, and booleans, are refused as in the rest of the package (dpmf_lit.core.checks)
    (lambda: P.gaussian_noise(10, "3"), "sigma='3' must be a number > 0"),
    (lambda: P.laplace_noise(10, True), "scale=True must be a number > 0"),
    (lambda: P.gaussian_delta(1.0, "0.5"), "epsilon='0.5' must be a number >= 0"),
    (lambda: P.gaussian_epsilon(1.0, "1e-5"), "delta='1e-5' must be a number in (0, 1)"),
    (lambda: P.gaussian_rdp(1.0, count="3"), "count='3' must be an integer >= 1"),
    (lambda: P.l2_laplace_noise(3, 2, 1.0, seed=-1), "seed=-1 must be an integer >= 0 or a numpy Generator"),
    (lambda: S.personalized_user_epsilon([1.0], 1.0, neighbour_weight=2.0), "neighbour_weight[0]=2.0"),
]


@pytest.mark.parametrize("call,message", BAD, ids=[m for _, m in BAD])
def test_bad_input_gives_a_clear_value_error(call, message):
    with pytest.raises(ValueError, match=None) as info:
        call()
    assert message in str(info.value), f"{message!r} not in {str(info.value)!r}"
