"""Liu, Wang & Smola (2015): the SGLD engine and the `sgld` mechanism (nbs/07_sgld.ipynb).

Statistical tests use fixed seeds; a correct sampler must pass at ACCEPT and a wrong one fail at REJECT."""
import numpy as np
import pytest
from scipy import stats

from dpmf_lit.data import synthetic
from dpmf_lit.core.kernels import numba_threads, prepare_sgd_blocks
from dpmf_lit.papers.sgld import (SGLD, clipped_loglik, gaussian_table, fresh_normals, local_user_fit, ou_coefficients, reweighting, sgld_epoch,
                           sgld_epoch_numpy, sgld_epoch_parallel, trim_ratings, user_loglik_bound)
from dpmf_lit.core.stats import ACCEPT, REJECT, ks_p


def _problem(n_u=60, n_i=25, n=900, d=3, seed=0, eta=0.03, lam=2.0, lam_b=1.0):
    r = synthetic(n_u, n_i, n, seed=seed)
    user, item, rating = (np.ascontiguousarray(a) for a in (r.user, r.item, r.rating))
    ou = lambda x, m: ou_coefficients(np.bincount(x, minlength=m), eta, lam, lam_b)
    return r, user, item, rating, ou(user, n_u), ou(item, n_i)


# ---- the Gaussian table and fresh draws -------------------------------------------------------------------------

@pytest.mark.parametrize("size", [1_000, 50_000])
def test_table_is_standard_normal_and_wrong_scale_rejected(size):
    t = gaussian_table(size, d=4, seed=1)[:size]
    assert ks_p(t, stats.norm.cdf) > ACCEPT
    if size >= 50_000:   # enough draws for power against a 10 % scale error
        assert ks_p(1.1 * t, stats.norm.cdf) < REJECT
        assert ks_p(t + 0.05, stats.norm.cdf) < REJECT


def test_table_padding_and_bad_sizes():
    t = gaussian_table(100, d=9, seed=0)
    assert t.dtype == np.float32 and len(t) == 100 + 20 and (t[100:] == t[:20]).all()
    assert (gaussian_table(100, 9, seed=0) == t).all() and not (gaussian_table(100, 9, seed=1) == t).all()
    for bad, msg in [(dict(table_size=9, d=9), "table_size=9"), (dict(table_size=100, d=0), "d=0"),
                     (dict(table_size=2.5, d=1), "table_size=2.5")]:
        with pytest.raises(ValueError, match=msg): gaussian_table(**bad)


def test_fresh_normals_distribution_and_independence_of_keys():
    a, b = np.empty(100_001, np.float32), np.empty(100_001, np.float32)
    fresh_normals(np.uint64(1), a); fresh_normals(np.uint64(2), b)
    assert ks_p(a, stats.norm.cdf) > ACCEPT and ks_p(b, stats.norm.cdf) > ACCEPT
    assert ks_p(0.95 * a, stats.norm.cdf) < REJECT
    assert abs(stats.pearsonr(a, b)[0]) < 0.015


# ---- kernels against the reference, and against each other ------------------------------------------------------

@pytest.mark.parametrize("use_bias", [True, False])
def test_serial_kernel_matches_numpy_reference(use_bias):
    r, user, item, rating, ou_u, ou_v = _problem()
    order = np.argsort(user, kind="stable")            # user visits, as the 'user' layout gives
    user, item, rating = user[order], item[order], rating[order]
    g = np.random.default_rng(3)
    U, V = (0.4 * g.standard_normal((60, 3))).astype(np.float32), (0.4 * g.standard_normal((25, 3))).astype(np.float32)
    b, c = (0.1 * g.standard_normal(60)).astype(np.float32), (0.1 * g.standard_normal(25)).astype(np.float32)
    w, table = g.uniform(0, 1, 60).astype(np.float32), gaussian_table(500, 3, seed=2)
    args = (3.0, 1.0, 5.0, 0.03, 0.9, w, ou_u, ou_v, table, 5, 2, use_bias)
    ref = [a.astype(np.float64) for a in (U, V, b, c)]
    sse_ref = sgld_epoch_numpy(user, item, rating, *ref, *args)
    got = [a.copy() for a in (U, V, b, c)]
    sse = sgld_epoch(user, item, rating, *got, *args)
    for x, y in zip(got, ref): np.testing.assert_allclose(x, y, rtol=3e-4, atol=3e-5)
    assert sse == pytest.approx(sse_ref, rel=1e-3)


def test_parallel_kernel_on_one_block_equals_serial_kernel():
    r, user, item, rating, ou_u, ou_v = _problem()
    blk = prepare_sgd_blocks(user, item, rating, 60, 25, n_threads=1, seed=0, layout="user")
    g = np.random.default_rng(0)
    state = [(0.3 * g.standard_normal((60, 3))).astype(np.float32), (0.3 * g.standard_normal((25, 3))).astype(np.float32),
             np.zeros(60, np.float32), np.zeros(25, np.float32)]
    w, table = np.ones(60, np.float32), gaussian_table(1000, 3, seed=0)
    args = (3.0, 1.0, 5.0, 0.02, 1.0, w, ou_u, ou_v, table, 9, 0, True)
    a, b = [x.copy() for x in state], [x.copy() for x in state]
    sgld_epoch(blk.user, blk.item, blk.rating, *a, *args)
    sgld_epoch_parallel(*blk, *b, *args)
    for x, y in zip(a, b): np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7)   # two compiled kernels: equal up to rounding


def _chain(noise: str, G: int, seeds: int, epochs: int, eta: float, lam: float, lik: float = 0.0, scale: float = 1.0,
           table_size: int = 65_536, threads: int = 1):
    """The values of V (and c) after `epochs` epochs of the parallel kernel over independent seeds, on a rating pattern
    where item degrees range from 1 to about 60; `lik` = 0 switches the likelihood off (the chain then targets the prior)."""
    r = synthetic(40, 30, 600, seed=1, noise=0.5, mean=3, interaction_sd=1,         # the plain low-rank set these
                  user_bias_sd=0, item_bias_sd=0, n_features=0)                     # tests' power was sized on
    keep = (r.item >= 5) | (np.arange(len(r)) % 7 == 0)            # items 0-4 rated only a few times
    user, item, rating = r.user[keep], r.item[keep], r.rating[keep]
    m = np.bincount(item, minlength=30)
    ou_u, ou_v = ou_coefficients(np.bincount(user, minlength=40), eta, lam, lam), ou_coefficients(m, eta, lam, lam)
    blk = prepare_sgd_blocks(user, item, rating, 40, 30, n_threads=threads, n_groups=G, seed=0, layout="user")
    out = []
    with numba_threads(threads):
        for s in range(seeds):
            g = np.random.default_rng(1000 + s)
            U, V = (g.standard_normal((40, 2)) / np.sqrt(lam)).astype(np.float32), (g.standard_normal((30, 2)) / np.sqrt(lam)).astype(np.float32)
            b, c = (g.standard_normal(40) / np.sqrt(lam)).astype(np.float32), (g.standard_normal(30) / np.sqrt(lam)).astype(np.float32)
            table = gaussian_table(table_size, 2, seed=s) * np.float32(scale) if noise == "table" else np.zeros(0, np.float32)
            for t in range(epochs):
                sgld_epoch_parallel(*blk, U, V, b, c, 3.0, 1.0, 5.0, eta, lik, np.ones(40, np.float32), ou_u, ou_v, table, s, t, True)
            out.append(np.c_[V, c].copy())
    return np.stack(out), m


@pytest.mark.parametrize("noise", ["table", "fresh"])
def test_sgld_without_data_samples_the_prior_whatever_the_rating_pattern(noise):
    """With the likelihood off, the per-visit exact OU moves leave N(0, 1/lam) invariant for every row, whether an item
    was rated once or sixty times: the release carries nothing about the rating pattern (even at a large step)."""
    eta, lam = 0.25, 4.0
    x, m = _chain(noise, G=1, seeds=60, epochs=60, eta=eta, lam=lam)
    few, many = x[:, m <= 3].ravel(), x[:, m >= 15].ravel()
    assert few.size > 300 and many.size > 300
    sd = 1 / np.sqrt(lam)
    for part in (few, many):
        assert ks_p(part, stats.norm(0, sd).cdf) > ACCEPT
    assert ks_p(many, stats.norm(0, 1.25 * sd).cdf) < REJECT        # a 25 % wrong noise scale is visible
    assert stats.ks_2samp(few, many).pvalue > ACCEPT


def test_serial_and_parallel_grids_agree_in_distribution_with_the_likelihood_on():
    "G = 1 (serial order) and G = 3 on two threads (block grid) sample the same law; a wrongly scaled table does not."
    eta, lam = 0.05, 4.0
    a, _ = _chain("table", G=1, seeds=40, epochs=60, eta=eta, lam=lam, lik=2.0)
    b, _ = _chain("table", G=3, seeds=40, epochs=60, eta=eta, lam=lam, lik=2.0, threads=2)
    assert stats.ks_2samp(a.ravel(), b.ravel()).pvalue > ACCEPT
    wrong, _ = _chain("table", G=3, seeds=40, epochs=60, eta=eta, lam=lam, lik=2.0, scale=2.0, threads=2)
    assert stats.ks_2samp(a.ravel(), wrong.ravel()).pvalue < REJECT


def test_unrated_items_are_released_as_prior_draws():
    "An item with no kept rating has the prior as its exact posterior: the release must draw it from the prior."
    r = synthetic(200, 50, 3_000, seed=3)
    r = r.take(np.flatnonzero(r.item >= 10))                          # items 0-9: nobody rated them
    m = SGLD(epsilon=5.0, tau=20, d=3, epochs=3, prior_std=0.5, lambda_b=4.0, seed=0)
    vals_V, vals_c = [], []
    for s in range(60):
        f = SGLD(**{**m.params(), "seed": s}).fit(r)
        vals_V.append(f.V[:10].ravel()); vals_c.append(f.item_bias[:10])
    assert ks_p(np.concatenate(vals_V), stats.norm(0, 0.5).cdf) > ACCEPT
    assert ks_p(np.concatenate(vals_c), stats.norm(0, 0.5).cdf) > ACCEPT
    assert not (np.concatenate(vals_c) == 0).any()


# ---- trimming, the likelihood bound, the mechanism ---------------------------------------------------------------

@pytest.mark.parametrize("tau", [1, 5, 50])
def test_trimming_leaves_at_most_tau_per_user(tau):
    r = synthetic(200, 60, 5_000, seed=4)
    t = trim_ratings(r, tau, seed=1)
    n0, n1 = np.bincount(r.user, minlength=200), np.bincount(t.user, minlength=200)
    assert (n1 == np.minimum(n0, tau)).all()
    kept = set(zip(t.user.tolist(), t.item.tolist()))
    assert kept <= set(zip(r.user.tolist(), r.item.tolist()))          # a subset of each user's own ratings
    w = reweighting(n0, tau)
    assert ((w * n0) <= tau + 1e-4).all() and (w <= 1).all()


def test_clipped_loglik_never_exceeds_B():
    "On random parameters (far outside the data's scale too), each trimmed user's clipped loss is <= B."
    r = synthetic(150, 40, 6_000, seed=5)
    tau, lam_r = 20, 1.7
    t = trim_ratings(r, tau, seed=0)
    B = user_loglik_bound(tau, lam_r, r.rating_min, r.rating_max)
    g = np.random.default_rng(0)
    for scale in (0.1, 1.0, 10.0):
        U, V = scale * g.standard_normal((150, 4)), scale * g.standard_normal((40, 4))
        b, c = scale * g.standard_normal(150), scale * g.standard_normal(40)
        pred = 3 + b[t.user] + c[t.item] + np.einsum("ij,ij->i", U[t.user], V[t.item])    # unclipped: the likelihood clips
        loss = -np.bincount(t.user, weights=clipped_loglik(t.rating, pred, lam_r, r.rating_min, r.rating_max), minlength=150)
        assert loss.max() <= B + 1e-9
    assert B == pytest.approx(0.5 * tau * lam_r * 16)


@pytest.mark.parametrize("threads", [1, 2])
def test_same_seed_and_threads_give_identical_output_and_seed_matters(threads):
    r = synthetic(300, 80, 8_000, seed=2)
    kw = dict(epsilon=50.0, tau=30, d=4, epochs=4, threads=threads)
    a, b = SGLD(**kw, seed=3).fit(r), SGLD(**kw, seed=3).fit(r)
    np.testing.assert_array_equal(a.V, b.V); np.testing.assert_array_equal(a.U, b.U)
    assert not np.array_equal(SGLD(**kw, seed=4).fit(r).V, a.V)
    f = SGLD(**kw, noise="fresh", seed=3).fit(r)
    assert np.isfinite(f.V).all() and not np.array_equal(f.V, a.V)


def test_report_and_personalized_epsilon():
    r = synthetic(100, 40, 3_000, seed=0)
    w = np.linspace(0, 1, 100)
    m = SGLD(epsilon=2.0, tau=10, d=2, epochs=2, weights=w).fit(r)
    rep = m.privacy
    assert rep.unit == "user" and rep.epsilon == pytest.approx(2.0) and rep.delta == 0.0
    assert "exact-sampling guarantee" in rep.summary() and "audited on a small model" in rep.summary()
    B = user_loglik_bound(10, 1.0, 1, 5)
    assert m.params["B"] == B and m.params["K"] == 2 * B and m.params["gamma"] == pytest.approx(2.0 / (2 * B))
    assert SGLD(epsilon=2.0, tau=10, d=2, epochs=1, constant="paper").fit(r).params["K"] == 4 * B
    assert SGLD(epsilon=2.0, tau=10, d=2, epochs=1, neighbouring="add_remove").fit(r).params["K"] == B
    with pytest.raises(ValueError, match="n_users=100"):
        SGLD(weights=[0.5, 1.0], d=2, epochs=1).fit(r)


def test_local_fit_is_ridge_on_the_users_own_ratings():
    r = synthetic(30, 20, 400, seed=1)
    g = np.random.default_rng(0)
    V, c = g.standard_normal((20, 3)).astype(np.float32), g.standard_normal(20).astype(np.float32)
    U, b = local_user_fit(r, V, c, 3.0, 0.5)
    for i in range(5):
        rows = r.user == i
        X = np.c_[V[r.item[rows]], np.ones(rows.sum())]
        y = r.rating[rows] - 3.0 - c[r.item[rows]]
        sol = np.linalg.solve(X.T @ X + 0.5 * np.eye(4), X.T @ y)
        np.testing.assert_allclose(np.r_[U[i], b[i]], sol, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("bad, msg", [
    (dict(epsilon=0), "epsilon=0"), (dict(epsilon=-1.0), "epsilon=-1"), (dict(tau=0), "tau=0"),
    (dict(weights=[0.2, -0.1]), r"weights\[1\]=-0.1"), (dict(weights=1.5), r"weights\[0\]=1.5"),
    (dict(d=16, table_size=33), "table_size=33"), (dict(lr=0), "lr=0"), (dict(lr=-1e-3), "lr=-0.001"),
    (dict(neighbouring="swap"), "neighbouring='swap'"), (dict(noise="pink"), "noise='pink'"),
])
def test_bad_input_named(bad, msg):
    with pytest.raises(ValueError, match=msg): SGLD(**bad)


def test_public_offset_outside_the_rating_range_is_refused_before_work():
    r = synthetic(50, 20, 500, seed=0)
    with pytest.raises(ValueError, match="mean=100"):
        SGLD(mean=100.0, d=2, epochs=1).fit(r)
