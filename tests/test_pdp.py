"""Tests of dpmf_lit.papers.pdp (Zhang et al.): the privacy specification generator, the sampler's keep rate (power-checked,
a wrong sampler rejected), the eta sampler DP-PMF uses (norm ~ Gamma(d, Delta/eps), uniform direction, half scale
rejected), the sample-then-t-DP theorem and the exact replacement bound on exact toy models, the mechanisms'
reports, and bad input."""
import math

import numpy as np
import pytest
from scipy import stats

from dpmf_lit.data import Ratings
from dpmf_lit.papers import pdp as P
from dpmf_lit.core.stats import ACCEPT, REJECT, independence_p, ks_p
from dpmf_lit.model.testing import small_split

N = 100_000



def _ratings(n=100_000):
    i = np.arange(n, dtype=np.int32)
    return Ratings(i // 100, i % 100, np.ones(n, np.float32), n // 100, 100, 1.0, 5.0, "t")


def test_pdp_generator_matches_paper_001():
    r = _ratings()
    s = P.pdp_privacy_spec(r, seed=3)
    e = s.epsilon
    assert len(s) == len(r) and s.to_sparse().shape == (r.n_users, r.n_items)
    cons, mod, lib = e < 0.2, (e >= 0.2) & (e < 1.0), e == 1.0
    assert cons.sum() == 54_000 and mod.sum() == 37_000 and lib.sum() == 9_000
    assert e[cons].min() >= 0.1 and ks_p((e[cons] - 0.1) / 0.1, stats.uniform.cdf) > ACCEPT
    assert ks_p((e[mod] - 0.2) / 0.8, stats.uniform.cdf) > ACCEPT
    assert abs(s.threshold("mean") - 0.393) < 0.003 and s.threshold("max") == 1.0
    s4 = P.pdp_privacy_spec(r, f_c=0.60, f_m=0.35, eps_m=0.4, seed=3)   # paper's Table 4: "0.445"
    assert abs(s4.threshold("mean") - 0.445) < 0.003
    # groups are randomly placed: group membership independent of position
    assert independence_p(np.arange(len(r)).astype(float), e) > ACCEPT
    assert np.array_equal(s.take(np.arange(10)).epsilon, e[:10])


def test_sampling_probability_formula():
    eps = np.array([0.1, 0.3, 0.5, 0.9])
    np.testing.assert_allclose(P.sampling_probability(eps, 0.5), [np.expm1(0.1) / np.expm1(0.5), np.expm1(0.3) / np.expm1(0.5), 1, 1])


def test_pdp_sample_keeps_each_rating_with_probability_pi():
    r = _ratings()
    s = P.pdp_privacy_spec(r, seed=4)
    t = s.threshold("mean")
    keep = P.pdp_sample(s, t, seed=5)
    pi = P.sampling_probability(s.epsilon, t)
    bins = np.digitize(pi, np.quantile(pi[pi < 1], [0.25, 0.5, 0.75]))
    bins[pi == 1] = 4
    obs = np.array([[keep[bins == b].sum(), (~keep[bins == b]).sum()] for b in range(5)])
    exp_k = np.array([pi[bins == b].sum() for b in range(5)])
    exp = np.stack([exp_k, (bins[:, None] == np.arange(5)).sum(0) - exp_k], axis=1)
    m = exp[:, 1] > 0
    assert stats.chisquare(obs[m].ravel(), exp[m].ravel()).pvalue > ACCEPT
    assert keep[pi == 1].all()
    wrong = np.random.default_rng(5).random(len(s)) < np.minimum(1, 0.5 * pi + 0.25)   # a wrong sampler
    obs_w = np.array([[wrong[bins == b].sum(), (~wrong[bins == b]).sum()] for b in range(5)])
    assert stats.chisquare(obs_w[m].ravel(), exp[m].ravel()).pvalue < REJECT


@pytest.mark.parametrize("t", [0.3, 0.6, 1.0])
def test_sample_then_t_dp_gives_eps_pq_exactly(t):
    "Exact output densities of (sample, then a t-DP Laplace count) on D and D minus one rating."
    others = np.array([0.2, 0.5, 0.8, 1.0, 0.35])
    pk = np.array([1.0])                       # distribution of the kept count among the other ratings
    for q in P.sampling_probability(others, t): pk = np.convolve(pk, [1 - q, q])
    o = np.linspace(-40, 60, 20001)
    lap = lambda c: 0.5 * t * np.exp(-t * np.abs(o[:, None] - c))          # Laplace(1/t) count: t-DP (add/remove)
    f_without = lap(np.arange(len(pk))) @ pk
    for eps_pq in (0.1, 0.3, 0.6, 1.0):
        pi = float(P.sampling_probability(eps_pq, t))
        f_with = pi * (lap(np.arange(len(pk)) + 1) @ pk) + (1 - pi) * f_without
        loss = np.log(f_with / f_without)
        bound = min(eps_pq, t)
        assert np.abs(loss).max() <= bound + 1e-9
        assert loss.max() >= bound - 1e-6            # attained in the tail: the guarantee is exactly min(eps_pq, t)


def test_pdp_report():
    r = _ratings(1000)
    s = P.pdp_privacy_spec(r, seed=1)
    t = s.threshold()
    rep = P.pdp_report(s, t)
    # the worst rating's guarantee is min(max eps_ij, t) = t (ratings with eps_ij >= t are always kept: t-DP)
    assert rep.epsilon == t < s.epsilon.max() and rep.delta == 0.0 and rep.unit == "rating" and rep.released == ("V",)
    assert P.pdp_report(s, s.threshold("max")).epsilon == s.epsilon.max()


# ---------------------------------------------------------------- the eta sampler of DP-PMF (Hua's, reused)
@pytest.mark.parametrize("d, eps, Delta", [(20, 0.1, 5.0), (3, 0.5, 4.0)])
def test_dp_pmf_noise_norm_gamma_direction_uniform_half_scale_rejected(d, eps, Delta):
    from dpmf_lit.papers.hua import sample_item_noise
    eta = sample_item_noise(N // d * 4, d, eps, Delta, seed=7)
    rad = np.linalg.norm(eta, axis=1)
    assert ks_p(rad, stats.gamma(d, scale=Delta / eps).cdf) > ACCEPT
    assert ks_p((eta[:, 0] / rad + 1) / 2, stats.beta((d - 1) / 2, (d - 1) / 2).cdf) > ACCEPT
    assert independence_p(rad, eta[:, 1] / rad) > ACCEPT                  # direction independent of the norm
    half = sample_item_noise(N // d * 4, d, eps, Delta / 2, seed=7)
    assert ks_p(np.linalg.norm(half, axis=1), stats.gamma(d, scale=Delta / eps).cdf) < REJECT


def test_expected_mean_and_the_papers_0445():
    assert abs(P.expected_mean_epsilon(0.60, 0.35, 0.1, 0.4, 1.0) - 0.445) < 1e-12
    assert abs(P.expected_mean_epsilon() - 0.393) < 1e-12


@pytest.mark.parametrize("t", [0.4, 1.0])
def test_replace_bound_exact_on_a_laplace_count_and_below_remark7(t):
    o = np.linspace(-60, 60, 24001)
    lap = lambda x: np.log(0.5 * t) - t * np.abs(o - x)
    for e in (0.1, 0.3):
        pi = float(P.sampling_probability(e, t))
        loss = np.logaddexp(np.log(pi) + lap(1), np.log1p(-pi) + lap(0)) - np.logaddexp(np.log(pi) + lap(-1), np.log1p(-pi) + lap(0))
        exact = float(P.replace_epsilon(pi, t, 2 * t))
        assert abs(loss.max() - exact) < 1e-6 and exact < 2 * min(e, t) - 1e-3
    assert float(P.replace_epsilon(1.0, t, 2 * t)) == pytest.approx(2 * t)   # always-kept ratings: 2t is attained


# ---------------------------------------------------------------- the mechanisms
@pytest.fixture(scope="module")
def split():
    return small_split()


def test_reports_state_unit_neighbouring_and_per_rating(split):
    train, _ = split
    zero = P.PDPPMF(d=3, k1=5, seed=0, dropped="zero").fit(train)
    t = zero.params["t_value"]
    assert zero.privacy.unit == "rating" and zero.privacy.released == ("V",)
    assert zero.privacy.epsilon == pytest.approx(t) and "set to 0" in zero.privacy.scope and "per rating" in zero.privacy.notes
    rem = P.PDPPMF(d=3, k1=5, seed=0).fit(train)
    assert rem.privacy.coverage == "conditional" and "value replaced only" in rem.privacy.condition and "no amplification" in rem.privacy.scope
    assert rem.privacy.epsilon == pytest.approx(t * 4 / 5)   # what holds (a value change) is headlined, with its condition
    fresh = P.DPPMF(d=3, k1=5, seed=0, k2=4, noise="fresh", epsilon=0.5).fit(train)
    assert fresh.privacy.epsilon == pytest.approx(2.0) and "PLD" in fresh.privacy.notes and fresh.params["solver"] == "gd"
    pf = P.PDPPMF(d=3, k1=5, seed=0, k2=4, noise="fresh", dropped="zero").fit(train)
    tf = pf.params["t_value"]
    assert pf.privacy.epsilon == pytest.approx(math.log1p(np.expm1(4 * tf))) and "PLD" in pf.privacy.notes
    assert "not covered" in P.DPPMF(d=3, k1=5, seed=0).fit(train).privacy.scope


def test_threshold_choices(split):
    train, _ = split
    m = P.PDPPMF(d=3, k1=5)
    spec = m.spec_for(train)
    assert P.PDPPMF(t="max").threshold_for(spec) == spec.epsilon.max()
    assert P.PDPPMF(t="expected").threshold_for(spec) == pytest.approx(0.393)
    assert P.PDPPMF(t=0.5).threshold_for(spec) == 0.5
    with pytest.raises(ValueError, match="t=2 must lie in"): P.PDPPMF(t=2.0).fit(train)


def test_closed_form_and_fixed_noise_gd_agree(split):
    train, _ = split
    m = P.DPPMF(d=3, epsilon=1.0, lam_v=1.0)
    U, V = P.pmf_gd(train, 3, k1=5, seed=0)
    a = P.DPPMF(d=3, epsilon=1.0, lam_v=1.0, seed=0).fit(train, U=U, V=V)   # the same noise: a seed given to both
    b = P.DPPMF(d=3, epsilon=1.0, lam_v=1.0, solver="gd", v_init="zero", k2=3000, gamma=1e6, seed=0).fit(train, U=U, V=V)
    np.testing.assert_allclose(a.V, b.V, atol=1e-3)


BAD = [
    (lambda: P.sampling_probability([0.1, -0.2], 0.5), "-0.2"),
    (lambda: P.sampling_probability([0.1], 0), "t=0"),
    (lambda: P.amplified_epsilon([0.2, 1.5], 1.0), "pi[1]=1.5"),
    (lambda: P.replace_epsilon([-0.1], 1.0, 1.0), "pi[0]=-0.1"),
    (lambda: P.PrivacySpec.for_ratings(_ratings(100), np.ones(99)), "shape (99,) but ratings has 100"),
    (lambda: P.PrivacySpec.for_ratings(_ratings(100), np.zeros(100)), "epsilon[0]=0.0"),
    (lambda: P.pdp_privacy_spec(_ratings(100), f_c=1.2), "f_c=1.2"),
    (lambda: P.pdp_privacy_spec(_ratings(100), f_c=-0.1), "f_c=-0.1"),
    (lambda: P.pdp_privacy_spec(_ratings(100), f_m="a lot"), "f_m='a lot'"),
    (lambda: P.pdp_report(P.pdp_privacy_spec(_ratings(1000)), 1.5), "t=1.5 must lie in"),
    (lambda: P.pdp_privacy_spec(_ratings(100), f_c=0.7, f_m=0.5), "f_c + f_m"),
    (lambda: P.pdp_privacy_spec(_ratings(100), eps_m=0.05), "eps_c=0.1 must be < eps_m=0.05"),
    (lambda: P.pdp_privacy_spec(_ratings(100), eps_m=1.0), "eps_m=1 must be < eps_l=1"),
    (lambda: P.pdp_sample(P.pdp_privacy_spec(_ratings(100)), 1.5), "t=1.5 must lie in"),
    (lambda: P.pdp_sample(P.pdp_privacy_spec(_ratings(1000)), 0.05), "t=0.05 must lie in"),
    (lambda: P.PDPPMF(k1=0), "k1=0"),
    (lambda: P.PDPPMF(k2=0), "k2=0"),
    (lambda: P.DPPMF(k1=0), "k1=0"),
    (lambda: P.PDPPMF(noise="sometimes"), "noise='sometimes'"),
    (lambda: P.PDPPMF(t="median"), "t='median'"),
    (lambda: P.PDPPMF(noise="fresh", solver="closed"), "noise='fresh' needs solver='gd'"),
    (lambda: P.PDPPMF(dropped="zero", sensitivity="range"), "sensitivity='range'"),
    (lambda: P.PDPPMF(dropped="maybe"), "dropped='maybe'"),
    (lambda: P.replace_epsilon(0.5, 1.0, -1.0), "m_replace=-1.0"),
]


@pytest.mark.parametrize("call, message", BAD)
def test_bad_input(call, message):
    with pytest.raises(ValueError) as e: call()
    assert message in str(e.value), str(e.value)


def test_sample_then_dp_pmf_exact_loss_zero_vs_remove_reading():
    """Exact densities of (keep (p,q) w.p. pi, then DP-PMF's closed form) for one item, r_pq = 5 against r_pq = 1: in the
    'zero' reading the loss attains 4.3's exact replacement bound (<= eps_pq); in the 'remove' reading it exceeds 2 eps_pq."""
    from dpmf_lit.papers.hua import sample_item_noise
    g = np.random.default_rng(0)
    d, t, e_pq, Delta = 3, 0.5, 0.1, 5.0
    Uq = g.standard_normal((6, d)); Uq /= np.linalg.norm(Uq, axis=1, keepdims=True)   # six raters of item q, unit rows
    u, r_other = Uq[0], g.integers(1, 6, 5).astype(float)
    A = Uq.T @ Uq + 0.01 * np.eye(d); A_rm = A - np.outer(u, u)
    b_drop = Uq[1:].T @ r_other
    log_f = lambda v, A_, b_: -t / Delta * np.linalg.norm(b_[None] - v @ A_.T, axis=1) + np.linalg.slogdet(A_)[1]
    pi = float(P.sampling_probability(e_pq, t))
    v = np.r_[np.linalg.solve(A, (b_drop + 5 * u - sample_item_noise(40000, d, t, Delta, seed=1)).T).T,
              1000 * g.standard_normal((40000, d))]
    def loss(A_drop):
        a, b_, c = log_f(v, A, b_drop + 5 * u), log_f(v, A, b_drop + u), log_f(v, A_drop, b_drop)
        return np.abs(np.logaddexp(np.log(pi) + a, np.log1p(-pi) + c) - np.logaddexp(np.log(pi) + b_, np.log1p(-pi) + c)).max()
    exact = float(P.replace_epsilon(pi, t, t * 4 / 5))
    assert exact < e_pq and 0.97 * exact <= loss(A) <= exact + 1e-9
    assert 2 * e_pq < loss(A_rm) <= t * 4 / 5 + 1e-9
