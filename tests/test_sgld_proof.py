"""Tests of the one-posterior-sample proof and the honest gap (dpmf_lit.papers.sgld): the clipped log-likelihood stays in
its bound, the OPS constants hold on exact discrete posteriors and are reached by adversarial instances, per-user weights
give what the prose says, the tiny model's exact posterior and sampler, the reference SGLD, and the privacy audit (valid
on exact samplers and on a Laplace mechanism of known ε, and catching a broken release)."""
import math

import numpy as np
import pytest
from scipy import stats

from dpmf_lit.papers import sgld as S
from dpmf_lit.core import stats as ST
from dpmf_lit.papers import sgld_checks as X
from dpmf_lit.core.privacy import laplace_noise
from dpmf_lit.core.stats import ACCEPT, REJECT, ks_p

NB = S.NEIGHBOURING


# ---------------------------------------------------------------- the bound B
def test_clipped_loglik_never_leaves_its_bound_on_random_inputs():
    rng = np.random.default_rng(0)
    for lam, lo, hi, tau in [(1.0, 1, 5, 10), (0.3, 0.5, 5, 3), (4.0, 0, 100, 1)]:
        r = rng.uniform(lo, hi, (5000, tau))
        pred = rng.normal((lo + hi) / 2, 50 * (hi - lo), (5000, tau))           # mostly far outside the range
        ll = S.clipped_loglik(r, pred, lam, lo, hi)
        B = S.user_loglik_bound(tau, lam, lo, hi)
        assert ll.max() <= 0 and ll.min() >= -lam * (hi - lo) ** 2 / 2 - 1e-12
        assert ll.sum(1).min() >= -B - 1e-9 and math.isclose(B, tau * lam * (hi - lo) ** 2 / 2)
    assert S.clipped_loglik(5.0, -100.0, 1.0, 1, 5) == -8.0                    # the worst case: the full range
    assert S.clipped_loglik(3.0, 3.0, 1.0, 1, 5) == 0.0


def test_ops_constants_and_temperatures():
    expected = {("two_sided", "replace"): 4, ("two_sided", "add_remove"): 2, ("one_sided", "replace"): 2, ("one_sided", "add_remove"): 1}
    for (loss, nb), k in expected.items():
        assert S.ops_epsilon(0.5, nb, loss) == 0.5 * k
        assert math.isclose(S.ops_likelihood_scale(2.0, 0.5, nb, loss), 2.0 / (0.5 * k))
    assert S.ops_epsilon(1.0) == 4.0                                           # the paper's default: two-sided, replace


# ---------------------------------------------------------------- exact enumeration
def _two_point(B, loss):
    "Two parameter values, prior mass 1e-12 on the first: records favouring either point."
    lp = np.log([1e-12, 1 - 1e-12])
    table = np.array([[B, -B], [-B, B]]) if loss == "two_sided" else np.array([[0.0, -B], [-B, 0.0]])
    return lp, table


@pytest.mark.parametrize("loss", ["two_sided", "one_sided"])
def test_ops_constants_hold_and_are_tight_on_a_two_point_space(loss):
    B = 0.7
    lp, table = _two_point(B, loss)
    for nb in NB:
        # the data set holds the record that favours the improbable point; its worst neighbour reaches the constant
        w = X.worst_log_ratio(lp, table, [0], nb)
        assert S.ops_epsilon(B, nb, loss) * (1 - 1e-6) < w <= S.ops_epsilon(B, nb, loss) + 1e-12


@pytest.mark.parametrize("loss", ["two_sided", "one_sided"])
def test_ops_constants_hold_on_random_discrete_posteriors(loss):
    rng = np.random.default_rng(3)
    B = 0.4
    for _ in range(150):
        m, n_rec = int(rng.integers(2, 40)), int(rng.integers(2, 12))
        lp = np.log(rng.dirichlet(np.full(m, 0.3)) + 1e-300)
        table = rng.uniform(-B, B, (n_rec, m)) if loss == "two_sided" else rng.uniform(-B, 0, (n_rec, m))
        table[0] = np.where(rng.random(m) < 0.5, table.max() if loss == "one_sided" else B, -B)   # an extreme record
        D = rng.integers(0, n_rec, int(rng.integers(1, 7)))
        for nb in NB: assert X.worst_log_ratio(lp, table, D, nb) <= S.ops_epsilon(B, nb, loss) + 1e-12


def test_clipped_mf_enumeration_reaches_2B_and_B_and_4B_is_twice_the_truth():
    recs, thetas, T = X.discrete_mf_table(values=(1.0, 2.0, 3.0, 4.0, 5.0), n_items=2, tau=2, grid=np.linspace(-3, 3, 13))
    assert len(recs) == 35 and np.all((~np.isnan(recs)).sum(1) <= 2)
    B = S.user_loglik_bound(2, 1.0, 1, 5)
    assert T.min() >= -B and T.max() <= 0 and math.isclose(T.min(), -B)
    lp = stats.norm.logpdf(thetas).sum(1)
    one, five = (int(np.flatnonzero((recs == r).all(1))[0]) for r in (1.0, 5.0))
    for g in (1.0, S.ops_likelihood_scale(1.0, B, "replace", "one_sided")):
        D = [one] * 2000 + [five]
        rep, ar = (X.worst_log_ratio(lp, g * T, D, nb) for nb in ("replace", "add_remove"))
        assert 0.99 * 2 * g * B < rep <= 2 * g * B + 1e-9
        assert 0.99 * g * B < ar <= g * B + 1e-9
        assert 0.49 < rep / S.ops_epsilon(g * B) <= 0.5 + 1e-12            # the paper's 4B, with the bound |L| <= B
    rng = np.random.default_rng(4)
    for _ in range(100):                                                  # arbitrary data sets never exceed the constants
        D = rng.integers(0, len(recs), int(rng.integers(1, 8)))
        lpr = np.log(rng.dirichlet(np.full(len(thetas), 0.2)) + 1e-300)
        assert X.worst_log_ratio(lpr, T, D, "replace") <= 2 * B + 1e-9
        assert X.worst_log_ratio(lpr, T, D, "add_remove") <= B + 1e-9


def test_weights_slot_and_travelling():
    "Replacing a user of weight w by a record of weight w' moves the log posterior by at most (w + w') gamma B."
    rng = np.random.default_rng(5)
    B, eps = 1.0, 1.0
    g = S.ops_likelihood_scale(eps, B, "replace", "one_sided")
    for _ in range(200):
        m = 20
        lp = np.log(rng.dirichlet(np.full(m, 0.3)) + 1e-300)
        others = rng.uniform(-B, 0, (3, m)).sum(0)
        w, w2 = rng.uniform(0, 1, 2)
        x, x2 = rng.uniform(-B, 0, (2, m))
        a = X.log_posterior(lp, g * np.vstack([others, w * x])); b = X.log_posterior(lp, g * np.vstack([others, w2 * x2]))
        assert np.abs(a - b).max() <= S.personalized_user_epsilon([w], eps, neighbour_weight=w2)[0] + 1e-12
        b_same = X.log_posterior(lp, g * np.vstack([others, w * x2]))
        assert np.abs(a - b_same).max() <= S.personalized_user_epsilon([w], eps)[0] + 1e-12
    lp, table = _two_point(B, "one_sided")                                # tight: (w + w') eps / 2
    for w, w2 in [(0.0, 1.0), (0.3, 0.3), (0.5, 1.0)]:
        r = X.log_posterior(lp, g * w * table[0]) - X.log_posterior(lp, g * w2 * table[1])
        target = S.personalized_user_epsilon([w], eps, neighbour_weight=w2)[0]
        assert target * (1 - 1e-6) < np.abs(r).max() <= target + 1e-12


# ---------------------------------------------------------------- the tiny model
@pytest.fixture(scope="module")
def pair():
    B = S.user_loglik_bound(1, 1.0, 1, 5)
    g = S.ops_likelihood_scale(1.0, B, "replace", "one_sided")
    D = X.TinyMF(np.r_[np.ones(8), 5.0], g)
    return D, X.tiny_posterior(D, grid=121, quad=201), X.tiny_posterior(D.replace(8, 1.0), grid=121, quad=201)


def test_user_marginal_is_one_sided_with_the_same_range():
    "log int prior(u) exp(gamma w l) du lies in [-gamma w B, 0]: the constants apply to the marginal of (v, c)."
    B = S.user_loglik_bound(1, 1.0, 1, 5)
    for g, w in [(1.0, 1.0), (0.3, 0.5)]:
        M = X.TinyMF(np.array([1.0]), g, weights=np.array([w]))
        v = np.linspace(-6, 6, 41); c = np.linspace(-6, 6, 41); z = np.linspace(-7, 7, 201)
        lq = stats.norm.logpdf(z); lq -= np.logaddexp.reduce(lq)
        for ub in (False, True):
            M.user_bias = ub
            for r in (1.0, 2.5, 5.0):
                m = X._user_marginal(M, v, c, z, lq, r, w)
                assert m.max() <= 1e-12 and m.min() >= -g * w * B - 1e-9


def test_user_marginal_matches_a_2d_quadrature_with_user_biases():
    "b + u v is N(0, 1/lambda_b + v^2/lambda_u): the 1-d integral equals the 2-d one over (u, b)."
    M = X.TinyMF(np.array([4.0]), 0.7, lambda_u=2.0, lambda_b=0.5, user_bias=True)
    v, c = np.array([-1.3, 0.0, 0.4, 2.0]), np.array([-2.0, 0.3, 1.5])
    z = np.linspace(-9, 9, 2001); lq = stats.norm.logpdf(z); lq -= np.logaddexp.reduce(lq)
    got = X._user_marginal(M, v, c, z, lq, 4.0, 1.0)
    u = np.linspace(-7, 7, 801) / math.sqrt(M.lambda_u); b = np.linspace(-7, 7, 801) / math.sqrt(M.lambda_b)
    wu = stats.norm.pdf(u, scale=1 / math.sqrt(M.lambda_u)); wb = stats.norm.pdf(b, scale=1 / math.sqrt(M.lambda_b))
    W = np.outer(wu, wb); W /= W.sum()
    for a, va in enumerate(v):
        for k, ck in enumerate(c):
            ll = S.clipped_loglik(4.0, M.mu + ck + b[None, :] + u[:, None] * va, 1.0, 1, 5)
            assert math.isclose(got[a, k], math.log((W * np.exp(M.gamma * ll)).sum()), abs_tol=2e-4)


def test_tiny_sgld_with_user_biases_matches_the_exact_posterior():
    B = S.user_loglik_bound(1, 1.0, 1, 5)
    D = X.TinyMF(np.r_[np.ones(6), 5.0], S.ops_likelihood_scale(4.0, B, "replace", "one_sided"), user_bias=True)
    P, P0 = X.tiny_posterior(D, 81, 161), X.tiny_posterior(X.TinyMF(D.ratings, D.gamma), 81, 161)
    v, c = X.tiny_sgld(D, 0.5, 100, 4000, seed=5)
    assert ks_p(v, P.cdf_v) > ACCEPT and ks_p(c, P.cdf_c) > ACCEPT
    assert ks_p(c, P0.cdf_c) < REJECT                                      # the posterior without user biases is another one


@pytest.mark.parametrize("eps", [0.5, 2.0])
@pytest.mark.parametrize("bias", [True, False])
def test_tiny_posterior_respects_the_derived_constants(eps, bias):
    B = S.user_loglik_bound(1, 1.0, 1, 5)
    others = np.r_[np.ones(6), 3.0, 4.0]
    for nb in NB:
        g = S.ops_likelihood_scale(eps, B, nb, "one_sided")
        D = X.TinyMF(np.r_[others, 5.0], g, bias=bias)
        P = X.tiny_posterior(D, grid=61, quad=121)
        if nb == "replace":
            neighbours = [D.replace(8, r) for r in (1.0, 2.0, 3.0)]
        else:
            neighbours = [X.TinyMF(others, g, bias=bias)]
        for D2 in neighbours:
            e = np.abs(P.log_p - X.tiny_posterior(D2, grid=61, quad=121).log_p).max()
            assert 0 < e <= eps + 1e-9 if bias else e <= eps + 1e-9


def test_tiny_posterior_and_exact_sampler(pair):
    D, P, _ = pair
    assert math.isclose(np.exp(P.log_p).sum(), 1.0, rel_tol=1e-12) and P.log_p.shape == (121, 121)
    v, c = P.sample(30_000, seed=1)
    assert ks_p(v, P.cdf_v) > ACCEPT and ks_p(1.15 * v, P.cdf_v) < REJECT
    assert ks_p(c, P.cdf_c) > ACCEPT and ks_p(c + 0.1, P.cdf_c) < REJECT
    assert np.array_equal(P.sample(10, seed=3)[0], P.sample(10, seed=3)[0])
    # the data pull c below 0 (8 of 9 users rate 1, mu = 3)
    assert np.exp(np.logaddexp.reduce(P.log_p, axis=0))[P.c < 0].sum() > 0.6


def test_tiny_sgld_is_seeded_and_reaches_the_prior_without_data():
    D = X.TinyMF(np.r_[np.ones(4), 5.0], 1e-9, lambda_v=2.0, lambda_b=0.5)   # negligible likelihood: the target is the prior
    a = X.tiny_sgld(D, 0.3, 40, 3000, seed=2)
    b = X.tiny_sgld(D, 0.3, 40, 3000, seed=2)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert ks_p(a[0], stats.norm(scale=1 / math.sqrt(2.0)).cdf) > ACCEPT
    assert ks_p(a[1], stats.norm(scale=1 / math.sqrt(0.5)).cdf) > ACCEPT
    assert ks_p(a[1], stats.norm(scale=1.0).cdf) < REJECT


def test_tiny_sgld_gap_small_steps_vs_large_steps(pair):
    D, P, _ = pair
    v, c = X.tiny_sgld(D, 0.5, 60, 4000, seed=3)
    assert ks_p(v, P.cdf_v) > ACCEPT and ks_p(c, P.cdf_c) > ACCEPT
    snaps = X.tiny_sgld(D, 0.5, 60, 4000, seed=3, snapshots=[1, 60])       # a snapshot at epoch E is the release after E epochs
    assert np.array_equal(snaps[-1][0], v) and ks_p(snaps[0][1], P.cdf_c) < REJECT   # after 1 epoch c is still near the prior
    v, c = X.tiny_sgld(D, 16.0, 60, 4000, seed=3)          # a large step: the exact prior moves stay stable, the gradient part does not
    assert ks_p(v, P.cdf_v) < REJECT and ks_p(c, P.cdf_c) < REJECT


# ---------------------------------------------------------------- the audit
def test_audit_is_a_valid_lower_bound_on_exact_samplers(pair):
    D, P, P2 = pair
    e_true = np.abs(P.log_p - P2.log_p).max()
    stat = lambda vc: P.log_density(*vc) - P2.log_density(*vc)
    found = []
    for s in range(4):
        a = X.audit_epsilon(stat(P.sample(20_000, 10 + s)), stat(P2.sample(20_000, 20 + s)), seed=s)
        assert a.epsilon <= e_true
        found.append(a.epsilon)
    assert max(found) > 0.1                                               # it has some power at this pair


def test_audit_on_a_laplace_mechanism_of_known_epsilon():
    "Laplace(1/eps) around 0 and around 1: eps-DP exactly, with the ratio e^eps on half of each distribution."
    for eps in (0.5, 1.0, 2.0):
        a = X.audit_epsilon(laplace_noise(100_000, 1 / eps, seed=1), 1 + laplace_noise(100_000, 1 / eps, seed=2), seed=0)
        assert 0.85 * eps < a.epsilon <= eps


def test_audit_gives_zero_on_identical_releases():
    hits = sum(X.audit_epsilon(np.random.default_rng(s).normal(size=2000), np.random.default_rng(100 + s).normal(size=2000), seed=s).epsilon > 0
               for s in range(20))
    assert hits <= 2                                                      # at most 5% of the runs may exceed the truth (0)


def test_audit_detects_an_untempered_release(pair):
    D, _, _ = pair
    Dh = X.TinyMF(D.ratings, 1.0)                                         # temperature 1 while claiming eps = 1
    Ph, Ph2 = X.tiny_posterior(Dh, 81, 161), X.tiny_posterior(Dh.replace(8, 1.0), 81, 161)
    stat = lambda vc: Ph.log_density(*vc) - Ph2.log_density(*vc)
    a = X.audit_epsilon(stat(Ph.sample(2000, 1)), stat(Ph2.sample(2000, 2)))
    assert a.epsilon > 1.0 and a.epsilon <= np.abs(Ph.log_p - Ph2.log_p).max()


def test_clopper_pearson_matches_scipy():
    lo, hi = ST.clopper_pearson(7, 50, 0.025)
    ci = stats.binomtest(7, 50).proportion_ci(0.95, method="exact")
    assert math.isclose(lo, ci.low, rel_tol=1e-9) and math.isclose(hi, ci.high, rel_tol=1e-9)
    assert ST.clopper_pearson(0, 10, 0.05)[0] == 0 and ST.clopper_pearson(10, 10, 0.05)[1] == 1


# ---------------------------------------------------------------- bad input
BAD = [
    (lambda: S.ops_epsilon(0.0), "B=0.0"),
    (lambda: S.ops_epsilon(1.0, "swap"), "neighbouring='swap'"),
    (lambda: S.ops_epsilon(1.0, "replace", "huber"), "loss='huber'"),
    (lambda: S.ops_likelihood_scale(-1.0, 1.0), "epsilon=-1.0"),
    (lambda: S.personalized_user_epsilon([0.5, 1.2], 1.0), "weights[1]=1.2"),
    (lambda: S.personalized_user_epsilon([0.5], 1.0, neighbour_weight=-0.1), "neighbour_weight[0]=-0.1"),
    (lambda: S.personalized_user_epsilon([0.5], 0.0), "base_epsilon=0.0"),
    (lambda: S.user_loglik_bound(0, 1.0, 1, 5), "tau=0"),
    (lambda: S.user_loglik_bound(5, -1.0, 1, 5), "lambda_r=-1.0"),
    (lambda: S.user_loglik_bound(5, 1.0, 5, 1), "r_max - r_min=-4.0"),
    (lambda: X.TinyMF(np.array([6.0]), 0.1), "ratings=[6.]"),
    (lambda: X.TinyMF(np.array([3.0]), 0.0), "gamma=0.0"),
    (lambda: X.TinyMF(np.array([3.0, 4.0]), 0.1, weights=np.array([1.0])), "weights must have shape"),
    (lambda: X.tiny_sgld(X.TinyMF(np.array([3.0]), 0.1), -0.1, 3, 2, seed=0), "eta=-0.1"),
    (lambda: X.tiny_sgld(X.TinyMF(np.array([3.0]), 0.1), 0.1, 0, 2, seed=0), "epochs=0"),
    (lambda: X.tiny_sgld(X.TinyMF(np.array([3.0]), 0.1), 0.1, 5, 2, seed=0, snapshots=[2, 9]), "snapshots=[2, 9]"),
    (lambda: X.audit_epsilon(np.zeros(3), np.zeros(10)), "need >= 4 runs"),
    (lambda: X.audit_epsilon(np.zeros(10), np.zeros(10), confidence=1.0), "confidence=1.0"),
]


@pytest.mark.parametrize("call,message", BAD, ids=[m for _, m in BAD])
def test_bad_input_gives_a_clear_value_error(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value)
