"""Xin & Jaakkola (NIPS 2014): the Sigma-form EM, Eq. 4, PMD/PMC and the mechanism 'xin' (dpmf_lit.papers.xin).

Statistical, bad-input and end-to-end checks; the derivations are in nbs/08_public_private."""
import itertools
import math

import numpy as np
import pytest
from scipy import stats

from dpmf_lit.data import random_split, synthetic
from dpmf_lit.model.mechanism import get_mechanism
from dpmf_lit.core.stats import ACCEPT, REJECT
from dpmf_lit.papers.xin import (MODES, WEIGHTS, XinPublicPrivate, e_step, eq4_direct, fit_sigma, holdout_rows, item_means,
                          laplace_response, local_factor, m_step, m_step_lowrank, m_step_top, objective, pmc_response, pmd_candidates, pmd_response,
                          soft_impute, sslp_constant, sslp_response, trace_weights, user_rows)


@pytest.fixture(scope="module")
def small():
    return synthetic(60, 40, 1200, rank=3, noise=0.2, seed=3)


@pytest.fixture(scope="module")
def split():
    return random_split(synthetic(300, 200, 12000, rank=5, noise=0.3, seed=1), 0.2, seed=0)


def test_eq4_equals_a_direct_solve():
    rng = np.random.default_rng(5)
    for m, d, k in ((30, 4, 5), (50, 8, 3), (20, 2, 20)):
        V = rng.normal(size=(m, d)); phi = np.sort(rng.choice(m, k, replace=False)); y = rng.normal(size=k)
        for lam in (0.01, 1.0, 30.0):
            np.testing.assert_allclose(V @ local_factor(V, phi, y, lam), eq4_direct(V @ V.T, phi, y, lam), atol=1e-9)
    with pytest.raises(ValueError, match="no ratings"): local_factor(V, phi[:0], y[:0], 1.0)


def test_em_objective_never_increases(small):
    rows, users, hist = user_rows(small), np.arange(60), []
    for lam in (0.1, 2.0):
        hist = []
        fit_sigma(rows, users, 40, 6, lam, 25, np.random.default_rng(0), history=hist,
                  V=np.random.default_rng(0).normal(scale=0.1, size=(40, 6)))
        G = [h["objective"] for h in hist]
        assert all(b <= a * (1 + 1e-9) for a, b in zip(G, G[1:])), G
        assert G[-1] < G[0]


def test_sigma_form_reproduces_eq2_at_the_derived_lambda(small):
    rows = user_rows(small); indptr, item, rating = rows
    n, m, lam = 60, 40, 0.1
    mu = item_means(rows, np.arange(n), m)
    Y = np.zeros((n, m)); mask = np.zeros((n, m), bool)
    for i in range(n):
        sl = slice(indptr[i], indptr[i + 1]); Y[i, item[sl]] = rating[sl] - mu[item[sl]]; mask[i, item[sl]] = True
    X = soft_impute(Y, mask, lam * math.sqrt(m * n))
    P, s, Qt = np.linalg.svd(X, full_matrices=False)
    Sig = (Qt.T * s) @ Qt / math.sqrt(m * n)
    gap = lambda l: max(np.abs(eq4_direct(Sig, item[indptr[i]:indptr[i + 1]], Y[i, item[indptr[i]:indptr[i + 1]]], l) - X[i]).max()
                        for i in range(n))
    assert gap(lam) < 1e-9 and gap(lam * 2 * math.sqrt(m * n)) > 0.1 and gap(2 * lam) > 1e-3


def test_pmd_release_has_exactly_uniform_marginals():
    rng = np.random.default_rng(0)
    S = np.arange(0.5, 5.01, 0.5); m = 60
    mu = rng.uniform(2.5, 4, m); r = S[np.abs((mu + rng.normal(0, 1, m))[:, None] - S).argmin(1)]
    X = pmd_candidates(r, mu, S, rng)
    assert (np.sort(X, axis=0) == S[:, None]).all()   # each coordinate a permutation of S over the K candidates
    draws = np.array([pmd_response(r, mu, S, np.random.default_rng(s))[:3] for s in range(4000)])
    for j in range(3):   # chi-square against uniform: accepted
        counts = np.array([(draws[:, j] == v).sum() for v in S])
        assert stats.chisquare(counts).pvalue > ACCEPT
    # a wrong variant (the true rating with prob. 1/2, else uniform) is rejected
    rng2 = np.random.default_rng(1); bad = np.where(rng2.random(4000) < 0.5, r[0], rng2.choice(S, 4000))
    assert stats.chisquare(np.array([(bad == v).sum() for v in S])).pvalue < REJECT


def test_pmc_marginal_is_symmetric_with_variance_h2():
    rng = np.random.default_rng(2); m = 30
    mu = rng.uniform(2.5, 4, m); r = mu + rng.normal(0, 1, m); h = np.abs(r - mu).mean()
    draws = np.array([pmc_response(r, mu, np.random.default_rng(s)) for s in range(20000)])
    x = draws[:, 0]
    assert np.allclose(np.abs(x), h)
    assert stats.binomtest(int((x > 0).sum()), len(x), 0.5).pvalue > ACCEPT
    assert abs(x.var() - h * h) < 0.02 * h * h
    # the sign pattern is revealed up to one global flip
    assert all(abs(np.sign(d) @ np.sign(r - mu)) == m for d in draws[:50])
    assert abs(x.var() - (1.1 * h) ** 2) > 0.1 * h * h   # a wrong scale (1.1 h) is told apart


def test_laplace_response_scale():
    rng = np.random.default_rng(3); r = np.full(20000, 3.0)
    noise = laplace_response(r, 1.0, 5.0, 2.0, rng) - 3.0
    assert stats.kstest(noise, stats.laplace(scale=2.0).cdf).pvalue > ACCEPT
    assert stats.kstest(noise, stats.laplace(scale=1.0).cdf).pvalue < REJECT


def test_bad_input():
    for k, v in (("public", 0.0), ("public", 1.5), ("public", -0.1), ("weight", 0.0), ("weight", 1.2), ("mode", "sslp2")):
        with pytest.raises(ValueError, match=f"{k}="): XinPublicPrivate(**{k: v})
    S = np.arange(1.0, 6.0); mu = np.full(4, 3.0)
    with pytest.raises(ValueError, match="K=1"): pmd_candidates(np.ones(4), mu, S[:1], np.random.default_rng(0))
    with pytest.raises(ValueError, match="off the discrete scale"): pmd_candidates(np.array([1, 2, 3.5, 4]), mu, S, np.random.default_rng(0))
    with pytest.raises(ValueError, match="discrete scale"):
        XinPublicPrivate(mode="pmd", n_private=5, d=3, epochs=2).fit(synthetic(50, 30, 600, rating_levels=41))


def test_modes_fit_and_report(split):
    tr, te = split
    for mode in MODES:
        f = get_mechanism("xin")(public=0.2, d=4, lam=2.0, epochs=4, mode=mode, **({} if mode == "local" else dict(n_private=40))).fit(tr)
        rmse = float(np.sqrt(np.mean((f.predict_codes(te.user, te.item) - te.rating) ** 2)))
        assert rmse < 1.3, (mode, rmse)
        rep = f.privacy
        if mode == "laplace":
            assert rep.private and rep.unit == "user" and rep.epsilon == pytest.approx(tr.n_items * 1.0)
        elif mode == "sslp":
            assert rep.private and rep.unit == "user" and rep.epsilon == pytest.approx(1.0)
        else:
            assert not rep.private and rep.epsilon is None
        if mode in ("pmd", "pmc"): assert "not DP" in rep.method and "deniability" in rep.method
        assert f.params["n_responses"] == (0 if mode in ("local",) else 40)


def test_public_selection(split):
    tr, _ = split
    counts = np.bincount(tr.user, minlength=tr.n_users)
    most, _ = XinPublicPrivate(public=0.1)._users(tr)
    assert counts[most].min() >= np.sort(counts)[::-1][len(most) - 1]
    rand, _ = XinPublicPrivate(public=0.1, select="random")._users(tr)
    assert len(rand) == len(most) and set(rand) != set(most)


def test_fast_m_steps_equal_the_dense_one():
    rng = np.random.default_rng(9)
    for rows, m, k, d in ((30, 25, 4, 3), (200, 60, 10, 10), (15, 40, 6, 2)):
        A, B, w = rng.normal(size=(rows, k)), rng.normal(size=(m, k)), rng.uniform(0.1, 2, rows)
        Vd, Vl = m_step(A @ B.T, w, d), m_step_lowrank(A, B, w, d)
        np.testing.assert_allclose(Vd @ Vd.T, Vl @ Vl.T, atol=1e-9)
        Z = rng.normal(size=(rows, m)); Vd, Vt = m_step(Z, w, d), m_step_top(Z, w, d, rng)
        np.testing.assert_allclose(Vd @ Vd.T, Vt @ Vt.T, atol=1e-7)


# ---------------------------------------------------------------- SSLP (Duchi et al.'s l-infinity sampler)

def _sslp_law(v, B, eps, Bp):
    "Exact Pr(Z = B' z | v) over z in {-1, 1}^D (itertools order), D = len(v) odd."
    Z = np.array(list(itertools.product([-1.0, 1.0], repeat=len(v)))); pi = math.exp(eps) / (math.exp(eps) + 1)
    P = np.zeros(len(Z))
    for vt in Z:
        P += np.prod(np.where(vt > 0, 0.5 + v / (2 * B), 0.5 - v / (2 * B))) * np.where(Z @ vt > 0, pi, 1 - pi) / 2 ** (len(v) - 1)
    return Z * Bp, P


def test_sslp_constant():
    from scipy.special import comb
    for D in (1, 3, 5, 11, 101):
        s = np.array(list(itertools.product([-1, 1], repeat=D))) if D <= 11 else None
        assert sslp_constant(D) == pytest.approx(comb(D - 1, (D - 1) // 2) / 2 ** (D - 1), rel=1e-10)
        if s is not None: assert sslp_constant(D) == pytest.approx(s[s.sum(1) > 0, 0].mean(), rel=1e-12)
    for D in (0, 2, 1682):
        with pytest.raises(ValueError, match=f"D={D}"): sslp_constant(D)


def test_sslp_sampler_follows_its_law_and_is_eps_ldp():
    B, eps = 2.0, 5.0
    for v in (np.array([0.7, -1.5, 0.2]), np.array([2.0, 0.0, -0.3])):
        Bp = B * (math.exp(eps) + 1) / (math.exp(eps) - 1) / sslp_constant(3)
        Zs, P = _sslp_law(v, B, eps, Bp)
        np.testing.assert_allclose(P.sum(), 1.0, atol=1e-12)
        rng = np.random.default_rng(11); draws = np.array([sslp_response(v, B, eps, rng) for _ in range(20000)])
        assert set(np.round(np.abs(draws).ravel(), 9)) == {round(Bp, 9)}
        counts = np.bincount(((draws > 0) * [4, 2, 1]).sum(1), minlength=8)
        assert stats.chisquare(counts, P * len(draws)).pvalue > ACCEPT
        for wrong_eps in (1.0, 3.0):   # the law at another epsilon is rejected
            assert stats.chisquare(counts, _sslp_law(v, B, wrong_eps, Bp)[1] * len(draws)).pvalue < REJECT
    grid = [np.array(t) for t in itertools.product([-B, -0.5, 0.0, B], repeat=3)]
    laws = [_sslp_law(a, B, eps, 1.0)[1] for a in grid]
    ratio = max((a / b).max() for a in laws for b in laws)
    assert ratio <= math.exp(eps) * (1 + 1e-9) and ratio > math.exp(eps) * 0.5   # eps-LDP, and not far from tight


def test_sslp_is_unbiased_and_clips():
    B, eps = 2.0, 5.0
    v = np.array([0.7, -1.5, 0.2])
    Zs, P = _sslp_law(v, B, eps, B * (math.exp(eps) + 1) / (math.exp(eps) - 1) / sslp_constant(3))
    np.testing.assert_allclose(P @ Zs, v, atol=1e-12)   # exact
    rng = np.random.default_rng(3); v4 = np.array([1.0, -0.5, 3.0, -1.9])   # even m (padded), one entry clipped to B
    draws = np.array([sslp_response(v4, B, eps, rng) for _ in range(40000)])
    se = draws.std(0) / math.sqrt(len(draws)); target = np.clip(v4, -B, B)
    assert (np.abs(draws.mean(0) - target) < 4 * se).all()
    # a wrong constant (without 1/a_D) is biased and told apart
    assert (np.abs(draws.mean(0) * sslp_constant(5) - target) > 4 * se).any()


# ---------------------------------------------------------------- weighted trace norm

def test_weighted_trace_norm_reduces_to_uniform_under_uniform_marginals():
    full = synthetic(20, 12, 240, rank=2, noise=0.2, seed=4); rows = user_rows(full); users = np.arange(20)
    fu = fit_sigma(rows, users, 12, 3, 0.5, 6, np.random.default_rng(0))
    for zeta in (0.0, 0.1, 1.0):
        fw = fit_sigma(rows, users, 12, 3, 0.5, 6, np.random.default_rng(0), zeta=zeta)
        np.testing.assert_allclose(fu[2] @ fu[1].T, fw[2] @ fw[1].T, atol=1e-10)


def test_weighted_trace_norm_objective_and_weights(small):
    rows, users = user_rows(small), np.arange(60)
    p, q = trace_weights(rows, users, 40, 0.1)
    n_i = np.diff(rows[0])[users]
    np.testing.assert_allclose(p, 60 * (0.9 * n_i / n_i.sum() + 0.1 / 60))
    np.testing.assert_allclose(q, 40 * (0.9 * np.bincount(small.item, minlength=40) / len(small.item) + 0.1 / 40))
    hist = []
    fit_sigma(rows, users, 40, 6, 2.0, 25, np.random.default_rng(0), history=hist, zeta=0.1)
    G = [h["objective"] for h in hist]
    assert all(b <= a * (1 + 1e-9) for a, b in zip(G, G[1:])) and G[-1] < G[0]
    pu, qu = trace_weights(rows, users, 40, 1.0); assert np.allclose(pu, 1) and np.allclose(qu, 1)   # zeta = 1: uniform
    uw = fit_sigma(rows, users, 40, 6, 0.1, 5, np.random.default_rng(0), zeta=0.0)
    uu = fit_sigma(rows, users, 40, 6, 0.1, 5, np.random.default_rng(0))
    assert np.abs(uw[2] @ uw[1].T - uu[2] @ uu[1].T).max() > 0.05   # non-uniform marginals: a different fit
    with pytest.raises(ValueError, match="zeta=-0.5"): XinPublicPrivate(trace="weighted", zeta=-0.5)
    with pytest.raises(ValueError, match="trace="): XinPublicPrivate(trace="nuclear")


# ---------------------------------------------------------------- response weight by validation

def test_holdout_rows(small):
    rows = user_rows(small); pub = np.arange(10)
    kept, (hu, hj, hr) = holdout_rows(rows, pub, 0.1, np.random.default_rng(0))
    assert set(hu) <= set(pub) and len(hu) + len(kept[1]) == len(rows[1])
    n0, n1 = np.diff(rows[0]), np.diff(kept[0])
    assert (n1[10:] == n0[10:]).all() and (n0[pub] - n1[pub] == np.maximum(1, (0.1 * n0[pub]).astype(int))).all()
    held = set(zip(hu.tolist(), hj.tolist())); own = np.repeat(np.arange(len(n1)), n1)
    assert not held & set(zip(own.tolist(), kept[1].tolist()))


def test_weight_by_validation(split):
    tr, _ = split
    f = XinPublicPrivate(public=0.2, d=4, lam=0.03, epochs=4, mode="sslp", epsilon=5.0, n_private=40, weight=None, seed=0).fit(tr, progress=True)
    scores = f.params["validation"]
    assert set(scores) == set(WEIGHTS) and f.params["weight"] == min(scores, key=scores.get)
    assert scores[1e-5] < scores[0.5]   # SSLP's huge responses must weigh little
    g = XinPublicPrivate(public=0.2, d=4, lam=0.03, epochs=4, mode="sslp", epsilon=5.0, n_private=40, weight=f.params["weight"], seed=0).fit(tr)
    np.testing.assert_allclose(f.V, g.V)   # the refit is the run at the chosen weight
    assert XinPublicPrivate(public=0.2, d=4, epochs=2, weight=None).fit(tr).params["validation"] is None   # local: no weight


# ---------------------------------------------------------------- paper profile on an ML-10M-format fixture

def _ml10m_fixture(path, n_users=520, n_items=150, seed=7):
    "A ratings.dat in MovieLens 10M's format (user::item::rating::time, half stars 0.5..5) from a rank-3 model."
    rng = np.random.default_rng(seed)
    U, V = rng.normal(size=(n_users, 3)), rng.normal(size=(n_items, 3))
    lines = []
    for u in range(n_users):
        k = int(np.clip(rng.pareto(1.5) * 10 + 12, 12, n_items))
        for i in rng.choice(n_items, k, replace=False):
            r = np.clip(np.round(2 * (3.4 + 0.6 * U[u] @ V[i] + rng.normal(0, 0.4))) / 2, 0.5, 5.0)
            lines.append(f"{u + 1}::{i + 1}::{r:g}::{838985046 + len(lines)}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.slow
def test_paper_profile_on_an_ml10m_fixture(tmp_path):
    import json
    from pathlib import Path
    from dpmf_lit.data import load_movielens_dat
    from dpmf_lit.data.splits import holdout_per_user
    r = load_movielens_dat(_ml10m_fixture(tmp_path / "ratings.dat"), name="ml-10m")
    assert r.rating_min == 0.5 and len(np.unique(r.rating)) == 10   # K = 10 as in the paper
    man = json.loads((Path(__file__).parents[1] / "nbs/experiments/manifest.json").read_text())
    prof = {e["id"]: e["profiles"]["paper"] for e in man["entries"] if e["id"].startswith("xin-")}
    assert prof["xin-private-users"]["dataset"] == "ml-10m" and prof["xin-public-share"]["dataset"] == "ml-10m"
    p = prof["xin-private-users"]["parameters"]
    train, test = holdout_per_user(r, n_test=10, seed=0)
    n_rated = int((np.bincount(train.user) > 0).sum())
    rmse = lambda f: float(np.sqrt(np.mean((f.predict_codes(test.user, test.item) - test.rating) ** 2)))
    out = {}
    for mode in ("local", "pmd", "pmc", "laplace", "sslp", "exact", "full-em"):
        f = XinPublicPrivate(public=(p["n_public"] - 0.5) / n_rated, d=p["d"], lam=p["lam"], epochs=p["em_iters"],
                             mode=mode, seed=p["seed"], **({} if mode == "local" else dict(n_private=max(p["private"])))).fit(train)
        assert f.params["n_public"] == p["n_public"] and f.params["n_responses"] == (0 if mode == "local" else max(p["private"]))
        out[mode] = rmse(f)
    assert all(np.isfinite(v) and v < 2.0 for v in out.values()), out
    q = prof["xin-public-share"]["parameters"]
    for s in q["shares"]:
        f = XinPublicPrivate(public=s, d=q["d"], lam=q["lam"], epochs=2, seed=q["seed"]).fit(train)
        assert np.isfinite(rmse(f))
