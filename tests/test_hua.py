"""Hua, Xia & Zhong (IJCAI 2015): Scenario 1 (dpmf_lit.papers.hua) and the Scenario 2/3 protocol (dpmf_lit.papers.hua_protocol).

Cross-module, statistical, bad-input and end-to-end checks; the derivations are in nbs/03_hua_dpmf and nbs/04_hua_protocol."""
import math

import numpy as np
import pytest
from scipy import stats

from dpmf_lit.data import Ratings, random_split, synthetic
from dpmf_lit.model.mf import PMF, get_mechanism
from dpmf_lit.papers.hua import (HuaDPMF, clip_rows, gd_item_factors, item_degrees, item_normal_equations, privacy_loss,
                          rating_sensitivity, sample_item_noise, share_scale, solve_item_factors)
from dpmf_lit.papers.hua_protocol import (FixedPoint, HuaProtocol, communication_per_iteration, recommender_view_epsilon,
                                   run_protocol, noise_shares, conditional_mu, traffic_per_iteration)
from dpmf_lit.papers.hua_attacks import (ProbingRecommender, ZeroProbeRecommender, assert_recommender_blind, difference_attack,
                                  online_set_attack)
from dpmf_lit.core.stats import uniformity_pvalues
from dpmf_lit.core.privacy import l2_laplace_noise, laplace_noise
from dpmf_lit.papers import hua, hua_protocol

from dpmf_lit.core.stats import ACCEPT, REJECT, independence_p, ks_p

N = 100_000          # draws per statistical test of the noise shares


@pytest.fixture(scope="module")
def small():
    r = synthetic(300, 80, 6000, rank=5, seed=4)
    U = clip_rows(np.random.default_rng(1).standard_normal((r.n_users, 5)) * 0.6)
    return r, U


@pytest.fixture(scope="module")
def split():
    return random_split(synthetic(400, 150, 12000, rank=5, seed=0), 0.2, seed=0)


# ---------------------------------------------------------------- Scenario 1

def test_closed_form_is_the_minimizer_and_gd_converges_to_it(small):
    r, U = small
    A, b = item_normal_equations(r, U, 2.0)
    j = 7
    Uj = U[r.user[r.item == j]]
    np.testing.assert_allclose(A[j], Uj.T @ Uj + 2.0 * np.eye(5), atol=1e-10)
    np.testing.assert_allclose(b[j], Uj.T @ r.rating[r.item == j], atol=1e-8)
    eta = sample_item_noise(r.n_items, 5, 1.0, rating_sensitivity(r), seed=0)
    V = solve_item_factors(A, b, eta)
    np.testing.assert_allclose(np.einsum("jab,jb->ja", A, V) - b + eta, 0, atol=1e-8)   # zero gradient
    gaps = [np.abs(gd_item_factors(r, U, eta, 2.0, iters=T) - V).max() for T in (20, 200, 4000)]
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 1e-6


def test_noiseless_closed_form_equals_the_mf_modules_als_item_update(small):
    from dpmf_lit.model.mf import als_sweep, to_csr
    r, U = small
    V = solve_item_factors(*item_normal_equations(r, U, 3.0), np.zeros((r.n_items, 5)))
    Q = np.zeros((r.n_items, 5), np.float32); P = U.astype(np.float32); z = np.zeros(1, np.float32)
    als_sweep(*to_csr(r.item, r.user, r.rating, r.n_items), Q, P, np.zeros(r.n_items, np.float32), z, 0.0, 3.0, 0.0, False, False)
    np.testing.assert_allclose(Q, V, rtol=1e-4, atol=1e-4)


def test_sensitivity_is_the_rating_range_under_replace_only(small):
    r, _ = small
    assert rating_sensitivity(r) == r.rating_max - r.rating_min == 4.0
    with pytest.raises(ValueError, match="no finite sensitivity"): rating_sensitivity(r, "add_remove")
    with pytest.raises(ValueError, match="neighbouring='bounded'"): rating_sensitivity(r, "bounded")


def _item_system(U, users, ratings, reg):
    Uq = U[users]
    return Uq.T @ Uq + reg * np.eye(U.shape[1]), Uq.T @ ratings


def test_exact_privacy_loss_is_at_most_epsilon_under_replace_and_nearly_attained():
    rng = np.random.default_rng(0)
    d, eps, Delta, reg = 4, 0.7, 4.0, 1.0
    U = rng.standard_normal((30, d)); U /= np.linalg.norm(U, axis=1, keepdims=True)   # worst case ||u|| = 1
    users = np.arange(12); rating = rng.integers(1, 6, 12).astype(float); rating[0] = 1.0
    A, b = _item_system(U, users, rating, reg)
    r2 = rating.copy(); r2[0] = 5.0                                                    # largest replacement
    A2, b2 = _item_system(U, users, r2, reg)
    np.testing.assert_array_equal(A, A2)
    v = np.linalg.solve(A, (b[None] - sample_item_noise(50000, d, eps, Delta, seed=1)).T).T
    loss = privacy_loss(v, A, b, A2, b2, eps, Delta)
    assert np.abs(loss).max() <= eps + 1e-9
    assert np.abs(loss).max() > 0.95 * eps


def test_privacy_loss_is_unbounded_under_add_remove():
    rng = np.random.default_rng(0)
    d, eps, Delta, reg = 4, 1.0, 4.0, 1.0
    U = rng.standard_normal((30, d)); U /= np.linalg.norm(U, axis=1, keepdims=True)
    users = np.arange(12); rating = rng.integers(1, 6, 12).astype(float)
    A, b = _item_system(U, users, rating, reg)
    A2, b2 = _item_system(U, np.r_[users, 20], np.r_[rating, 5.0], reg)              # one rating added
    loss = privacy_loss(np.outer([1.0, 10.0, 100.0, 1000.0], U[20]), A, b, A2, b2, eps, Delta)
    assert np.abs(loss[-1]) > 100 * eps and np.abs(loss[-1]) > 5 * np.abs(loss[-2])
    # the Jacobian does not cancel, but its ratio is bounded: log det ratio = log(1 + u^T A^-1 u) <= log(1 + 1/reg)
    logdet = np.linalg.slogdet(A2)[1] - np.linalg.slogdet(A)[1]
    assert logdet == pytest.approx(math.log1p(U[20] @ np.linalg.solve(A, U[20]))) and 0 < logdet <= math.log1p(1 / reg)
    # the unbounded part is the output-dependent noise shift (r - u_p^T v) u_p: its slope along the ray
    slope = eps / Delta * (np.linalg.norm(A @ U[20] + U[20]) - np.linalg.norm(A @ U[20]))
    far = privacy_loss(1e6 * U[20][None], A, b, A2, b2, eps, Delta)[0]
    assert slope > 0 and far / 1e6 == pytest.approx(slope, rel=1e-3)


def test_add_remove_is_not_even_approximately_dp_uniformly_over_data():
    # nearly collinear raters who disagree: the ridge prediction for a new rater is far outside [1, 5]
    theta, k, reg, eps, Delta = 0.01, 10 ** 6, 5.0, 1.0, 4.0
    u1, u2, up = np.array([1.0, 0.0]), np.array([math.cos(theta), math.sin(theta)]), np.array([0.0, 1.0])
    A = k * (np.outer(u1, u1) + np.outer(u2, u2)) + reg * np.eye(2); b = k * (1.0 * u1 + 5.0 * u2)
    A2, b2 = A + np.outer(up, up), b + 1.0 * up                                            # add (p, q, r=1)
    assert up @ np.linalg.solve(A, b) > 100
    v = np.linalg.solve(A, (b[None] - sample_item_noise(20000, 2, eps, Delta, seed=0)).T).T
    loss = privacy_loss(v, A, b, A2, b2, eps, Delta)
    delta_at_20 = np.mean(np.clip(1 - np.exp(20 - loss), 0, None))                        # hockey-stick divergence
    assert delta_at_20 > 0.99


def test_l2_laplace_noise_has_the_scale_the_proof_needs():
    d, eps, Delta = 6, 0.5, 4.0
    radius = np.linalg.norm(sample_item_noise(20000, d, eps, Delta, seed=3), axis=1)
    assert stats.kstest(radius, "gamma", args=(d, 0, Delta / eps)).pvalue > 1e-3
    assert stats.kstest(radius, "gamma", args=(d, 0, Delta / (2 * eps))).pvalue < 1e-6      # half the noise: rejected
    coords = sample_item_noise(20000, d, eps, Delta, noise="hua-decomposition", seed=3).ravel()
    assert stats.kstest(coords, "laplace", args=(0, Delta * math.sqrt(d) / eps)).pvalue > 1e-3


def test_hua_mechanism_end_to_end(split):
    tr, te = split
    m = HuaDPMF(epsilon=1.0, d=5, seed=0)
    fit = m.fit(tr)
    assert fit.privacy.released == ("V",) and fit.privacy.unit == "rating" and fit.privacy.epsilon == 1.0
    assert "replace" in fit.privacy.notes and "given U" in fit.privacy.notes
    assert np.linalg.norm(fit.U, axis=1).max() <= 1 + 1e-6
    np.testing.assert_array_equal(fit.V, HuaDPMF(epsilon=1.0, d=5, seed=0).fit(tr).V)      # deterministic
    assert not np.array_equal(fit.V, HuaDPMF(epsilon=1.0, d=5, seed=1).fit(tr).V)
    pmf = PMF(d=5, epochs=20, solver="als", reg=0.1, bias=False, seed=0).fit(tr)
    mae = lambda model: float(np.abs(te.rating - model.predict_codes(te.user, te.item)).mean())
    errs = [mae(HuaDPMF(epsilon=e, d=5, seed=0).fit(tr, U=pmf.U)) for e in (0.05, 1.0, 1e9)]
    assert errs[0] > errs[1] > errs[2]
    assert HuaDPMF(epsilon=1.0, noise_multiplier=2.0).privacy_events(tr).report().epsilon == 0.5
    assert get_mechanism("hua") is HuaDPMF


def test_hua_gd_solver_agrees_with_closed_form(split):
    tr, _ = split
    U = PMF(d=4, epochs=10, solver="als", reg=0.1, bias=False, seed=0).fit(tr).U
    h = HuaDPMF(epsilon=1.0, d=4, seed=2)
    eta = h.noise_for(tr)
    closed = h.fit(tr, U=U, eta=eta).V
    gd = HuaDPMF(epsilon=1.0, d=4, seed=2, solver="gd", epochs=4000).fit(tr, U=U, eta=eta).V
    assert np.abs(closed - gd).max() < 1e-3


@pytest.mark.parametrize("kwargs, message", [
    (dict(epsilon=0), "epsilon=0"), (dict(epsilon=-1.0), "epsilon=-1.0"), (dict(epsilon=float("inf")), "epsilon=inf"),
    (dict(d=0), "d=0"), (dict(reg=0), "reg=0"), (dict(solver="sgd"), "solver='sgd'"), (dict(noise="gaussian"), "noise='gaussian'"),
    (dict(noise_multiplier=0), "noise_multiplier=0"), (dict(max_norm=-1), "max_norm=-1"), (dict(gd_iters=-5), "gd_iters=-5")])
def test_hua_bad_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")): HuaDPMF(**kwargs)


def test_hua_bad_inputs(split):
    tr, _ = split
    with pytest.raises(ValueError, match="U must have shape"): HuaDPMF(d=5).fit(tr, U=np.zeros((3, 5)))
    with pytest.raises(ValueError, match="eta must have shape"): HuaDPMF(d=5).fit(tr, U=np.zeros((tr.n_users, 5)), eta=np.zeros(3))
    with pytest.raises(ValueError, match="singular"):
        solve_item_factors(np.zeros((2, 3, 3)), np.zeros((2, 3)), np.zeros((2, 3)))


# ---------------------------------------------------------------- Scenarios 2 and 3

def test_fixed_point_sums_decode_exactly_and_small_modulus_is_refused():
    c = FixedPoint(scale=2.0 ** 20, modulus=2 ** 62, bound=1e4)
    x = np.random.default_rng(0).uniform(-100, 100, size=(5000, 2))
    total = c.segment_sum(np.zeros(len(x)), c.add(c.encode(x), c.uniform(np.random.default_rng(1), x.shape)), 1)
    masks = c.segment_sum(np.zeros(len(x)), c.uniform(np.random.default_rng(1), x.shape), 1)
    exact = np.array([sum(int(v) for v in np.rint(x[:, a] * 2.0 ** 20)) for a in range(2)]) / 2.0 ** 20
    np.testing.assert_array_equal(c.decode(c.sub(total, masks))[0], exact)
    with pytest.raises(ValueError, match="modulus=65536 is too small"): FixedPoint(scale=2.0 ** 10, modulus=2 ** 16, bound=100.0)
    with pytest.raises(ValueError, match="exceeds the codec's bound"): c.encode([2e4])
    with pytest.raises(ValueError, match="modulus="): FixedPoint(modulus=1)


@pytest.mark.parametrize("scenario", [2, 3])
def test_protocol_v_equals_scenario1_v_with_the_same_noise(small, scenario):
    r, U = small
    run = run_protocol(r, U, 1.0, reg=5.0, iters=40, scenario=scenario, seed=0)
    V1 = gd_item_factors(r, U, run.users.noise_total(r.n_items), 5.0, iters=40)
    assert np.abs(run.V - V1).max() < 1e-5
    assert_recommender_blind(run)


def test_scenario3_noise_is_exactly_eta_in_every_iteration_with_users_coming_and_going(small):
    r, U = small
    models = {}
    def tap(batch):
        if batch.kind == "model": models[batch.t] = (batch.rows, batch.payload["v"])
    run = run_protocol(r, U, 1.0, reg=5.0, iters=8, scenario=3, p_online=0.6, group_size=3, seed=2, taps=[tap])
    eta = run.users.noise_total(r.n_items)
    assert eta.any()
    checked = 0
    for t, items, V, g in run.recommender.view:
        rows, v = models[t]
        Ur = U[r.user[rows]]
        grad = (np.einsum("nd,nd->n", Ur, v) - r.rating[rows])[:, None] * Ur
        gsum = np.zeros((r.n_items, U.shape[1])); np.add.at(gsum, r.item[rows], grad)
        assert np.abs(g - gsum[items] - eta[items]).max() < 1e-4     # the online group changes; the noise does not
        checked += len(items)
    assert checked > r.n_items
    assert len({tuple(rows) for rows, _ in models.values()}) == len(models) > 1               # the group really changed


def test_scenario3_recommender_recovers_each_raters_rating_times_profile():
    r = synthetic(120, 8, 800, rank=4, seed=3)
    U = clip_rows(np.random.default_rng(5).standard_normal((r.n_users, 4)) * 0.6)
    run = run_protocol(r, U, 1.0, reg=5.0, iters=250, scenario=3, p_online=0.5, seed=2, recommender_cls=ZeroProbeRecommender)
    assert_recommender_blind(run)                                        # it only ever received sums of >= 2 users ...
    for j in range(r.n_items):
        rows, Y, eta = online_set_attack(run, j)                         # ... yet it gets every rater's r_ij u_i
        np.testing.assert_allclose(-Y, r.rating[rows, None] * U[r.user[rows]], atol=1e-5)
        np.testing.assert_allclose(eta, run.users.noise_total(r.n_items)[j], atol=1e-5)
    everyone = run_protocol(r, U, 1.0, reg=5.0, iters=30, scenario=3, seed=2, recommender_cls=ZeroProbeRecommender)
    with pytest.raises(ValueError, match="do not separate"): online_set_attack(everyone, 0)   # static group: no leak this way
    fit = HuaProtocol(epsilon=1.0, d=4, epochs=5, scenario=3, p_online=0.7, pmf_epochs=3).fit(r)
    assert "no DP guarantee against the recommender" in fit.privacy.notes


def test_users_messages_are_uniform_mod_p_as_the_third_party_sees_them(small):
    r, U = small
    user = int(np.bincount(r.user).argmax())
    seen = []
    def tap(batch):
        if batch.receiver == "third_party" and batch.kind == "masked_gradient":
            seen.append(batch.payload["phi"][r.user[batch.rows] == user].ravel())
    run = run_protocol(r, U, 1.0, reg=5.0, iters=120, scenario=2, seed=7, taps=[tap])
    seen = np.concatenate(seen)
    assert seen.size > 10000
    assert min(uniformity_pvalues(seen, run.users._codec.modulus)) > 1e-3
    c = FixedPoint()
    plain = c.encode(np.random.default_rng(0).standard_normal(seen.size))             # control: no mask
    assert max(uniformity_pvalues(plain, c.modulus)) < 1e-6


def test_recommender_never_receives_a_users_payload(small):
    r, U = small
    run = run_protocol(r, U, 1.0, iters=3, scenario=2, seed=0)
    kinds = {(k, s) for k, s, *_ in run.recommender.received}
    assert kinds == {("request", "users"), ("aggregate", "third_party")}
    run.recommender.received.append(("masked_gradient", "users", 0, 1, {}))            # a leak must be caught
    with pytest.raises(AssertionError): assert_recommender_blind(run)


def test_aggregate_noise_is_per_coordinate_laplace_not_l2_laplace():
    big = synthetic(2000, 400, 40000, rank=5, seed=9)
    U = clip_rows(np.random.default_rng(2).standard_normal((big.n_users, 5)))
    eta = run_protocol(big, U, 1.0, iters=0, scenario=2, seed=3).users.noise_total(big.n_items)
    b = share_scale(1.0, rating_sensitivity(big), 5)
    assert stats.kstest(eta.ravel(), "laplace", args=(0, b)).pvalue > 1e-3
    assert stats.kstest(eta.ravel(), "laplace", args=(0, b / 2)).pvalue < 1e-6
    assert stats.kstest(np.linalg.norm(eta, axis=1), "gamma", args=(5, 0, rating_sensitivity(big))).pvalue < 1e-3
    # the actors' shares have the law of noise_shares, at the same scale (no factor 2 anywhere)
    shares = noise_shares(4, 5, 1.0, rating_sensitivity(big), seed=1, n=4000).sum(axis=1)
    assert stats.ks_2samp(eta.ravel(), shares.ravel()).pvalue > 1e-3
    assert stats.ks_2samp(eta.ravel(), 2 * shares.ravel()).pvalue < 1e-6               # the unscaled-loss 2x is detected


def test_recommender_knowing_h_gets_a_weaker_than_pure_guarantee():
    H = np.random.default_rng(0).standard_exponential((500, 10))
    eps = np.array([recommender_view_epsilon(h, 1.0, 4.0) for h in H])
    assert np.median(eps) > 1.0
    assert recommender_view_epsilon(np.full(10, 1e-4), 1.0, 4.0) > 20 * recommender_view_epsilon(np.full(10, 1.0), 1.0, 4.0)


def test_malicious_recommender_recovers_the_raters_gram_matrix(small):
    r, U = small
    run = run_protocol(r, U, 1.0, reg=5.0, iters=10, scenario=2, seed=0, recommender_cls=ProbingRecommender)
    for j in (0, 5, 17):
        G = U[r.user[r.item == j]].T @ U[r.user[r.item == j]]
        assert np.abs(difference_attack(run.recommender.view, j, 6) - G).max() < 1e-4 * np.abs(G).max()


@pytest.mark.parametrize("scenario", [2, 3])
def test_communication_counts_match_the_formula(small, scenario):
    r, U = small
    run = run_protocol(r, U, 1.0, iters=2, scenario=scenario, seed=0, keep_view=False)
    assert traffic_per_iteration(run, 1) == communication_per_iteration(len(r), r.n_items, 5, scenario)
    per = communication_per_iteration(len(r), r.n_items, 5, scenario)
    assert per["total"]["messages"] == 3 * len(r) + r.n_items


def test_protocol_bad_inputs(small):
    r, U = small
    one = Ratings(np.array([0, 1, 0], np.int32), np.array([0, 0, 1], np.int32), np.array([3, 4, 5], np.float32), 2, 2, 1.0, 5.0)
    with pytest.raises(ValueError, match="fewer than 2 raters"): run_protocol(one, np.zeros((2, 3)), 1.0)
    with pytest.raises(ValueError, match="epsilon=0"): run_protocol(r, U, 0)
    with pytest.raises(ValueError, match="epsilon=-1"): run_protocol(r, U, -1)
    with pytest.raises(ValueError, match="k=1"): run_protocol(r, U, 1.0, scenario=3, group_size=1)
    with pytest.raises(ValueError, match="too small"): run_protocol(r, U, 1.0, codec=FixedPoint(modulus=2 ** 40))
    with pytest.raises(ValueError, match="scenario=5"): run_protocol(r, U, 1.0, scenario=5)
    with pytest.raises(ValueError, match="U must have shape"): run_protocol(r, U[:10], 1.0)
    with pytest.raises(ValueError, match="k=1"): HuaProtocol(k=1)
    with pytest.raises(ValueError, match="k=3 needs scenario=3"): HuaProtocol(k=3, scenario=2)
    with pytest.raises(ValueError, match="needs scenario=3"): run_protocol(r, U, 1.0, scenario=2, group_size=3)
    with pytest.raises(ValueError, match="p_online=0"): run_protocol(r, U, 1.0, scenario=3, p_online=0)
    with pytest.raises(ValueError, match="epsilon=0"): HuaProtocol(epsilon=0)
    with pytest.raises(ValueError, match="too small"): HuaProtocol(modulus_bits=30)
    with pytest.raises(ValueError, match="fewer than 2 raters"): HuaProtocol(d=3).fit(one)


def test_hua_protocol_mechanism_and_cli_report(split):
    tr, te = split
    fit = HuaProtocol(epsilon=1.0, d=4, epochs=30, sparse_items="drop").fit(tr)
    assert fit.privacy.released == ("V",) and fit.privacy.epsilon == 1.0 and "knows H" in fit.privacy.notes
    assert get_mechanism("hua-protocol") is HuaProtocol
    few = tr.take(np.flatnonzero(tr.item != 3))                                   # item 3: no rater; item 4: one rater
    few = few.take(np.r_[np.flatnonzero(few.item != 4), np.flatnonzero(few.item == 4)[:1]])
    with pytest.raises(ValueError, match="fewer than 2 raters"): HuaProtocol(d=4, epochs=2).fit(few)
    dropped = HuaProtocol(d=4, epochs=5, sparse_items="drop").fit(few)
    assert not dropped.V[[3, 4]].any() and dropped.V.shape == (tr.n_items, 4) and dropped.V[0].any()
    from dpmf_lit.cli.main import fit_report
    rep = fit_report("hua", "synthetic:n_users=200,n_items=100,n_ratings=5000", {"epsilon": 1.0, "d": 4})
    assert rep["privacy"]["epsilon"] == 1.0 and rep["privacy"]["released"] == ["V"] and rep["rmse"] > 0


def test_sparse_items_drop_covers_the_online_check_at_setup():
    "Scenario 3: items with < 2 online raters at set-up are refused by default, left out (v_j = 0) with 'drop'."
    r0 = synthetic(300, 200, 1500, rank=4, seed=7)                # many items with only a few raters
    keep_items = np.flatnonzero(np.bincount(r0.item, minlength=r0.n_items) >= 2)
    r0 = r0.take(np.flatnonzero(np.isin(r0.item, keep_items)))     # every item has >= 2 raters, some only 2 or 3
    r = Ratings(r0.user, np.searchsorted(keep_items, r0.item).astype(np.int32), r0.rating, r0.n_users, len(keep_items),
                r0.rating_min, r0.rating_max)
    U = clip_rows(np.random.default_rng(0).standard_normal((r.n_users, 4)) * 0.6)
    with pytest.raises(ValueError, match="fewer than 2 online raters at set-up.*sparse_items='drop'"):
        run_protocol(r, U, 1.0, iters=3, scenario=3, p_online=0.5, seed=0)
    run = run_protocol(r, U, 1.0, iters=20, scenario=3, p_online=0.5, seed=0, sparse_items="drop")
    assert len(run.dropped) > 0 and not run.V[run.dropped].any()          # never updated: no noise was shared for them
    live = np.setdiff1d(np.arange(r.n_items), run.dropped)
    assert np.abs(run.V[live]).sum(1).min() > 0
    assert_recommender_blind(run)
    # the ratings of dropped items are never sent: no masked gradient of a dropped item reaches the third party
    assert not np.isin(run.users._item[run.users._has_piece], run.dropped).any()
    fit = HuaProtocol(epsilon=1.0, d=4, epochs=5, scenario=3, p_online=0.5, pmf_epochs=3, sparse_items="drop").fit(r)
    assert fit.history[-1]["dropped_at_setup"] > 0 and "online at set-up" in fit.privacy.notes
    with pytest.raises(ValueError, match="sparse_items='drop'"):
        HuaProtocol(epsilon=1.0, d=4, epochs=5, scenario=3, p_online=0.5, pmf_epochs=3).fit(r)
    with pytest.raises(ValueError, match="sparse_items='keep'"): run_protocol(r, U, 1.0, sparse_items="keep")


def test_protocol_progress_bar(capsys):
    "progress=True draws a bar over the protocol's iterations on stderr; progress=False draws nothing."
    r = synthetic(100, 20, 800, rank=3, seed=1)
    U = clip_rows(np.random.default_rng(0).standard_normal((r.n_users, 3)) * 0.6)
    run_protocol(r, U, 1.0, iters=4, scenario=2, seed=0, progress=False)
    assert "hua-protocol" not in capsys.readouterr().err
    run_protocol(r, U, 1.0, iters=4, scenario=2, seed=0, progress=True)
    assert "hua-protocol S2" in capsys.readouterr().err
    HuaProtocol(d=3, epochs=4, pmf_epochs=2, sparse_items="drop").fit(r, progress=True)
    assert "hua-protocol S2" in capsys.readouterr().err


def test_honest_but_curious_recommender_recovers_ratings_in_scenario3():
    "No probe needed: past k_j(d+1)+1 iterations the regression on z_i(t) v_j(t), z_i(t) returns r_ij u_i; fresh noise slows it."
    from dpmf_lit.papers.hua_attacks import honest_online_set_attack
    r = synthetic(120, 12, 500, rank=3, seed=5)
    U = clip_rows(np.random.default_rng(3).standard_normal((r.n_users, 3)) * 0.6)
    run = run_protocol(r, U, 1.0, reg=5.0, iters=300, scenario=3, p_online=0.5, seed=1)    # the default, honest recommender
    errs, noisy = [], []
    for j in range(r.n_items):
        rows, X = honest_online_set_attack(run, j)
        if X is None: continue
        truth = r.rating[rows, None] * U[r.user[rows]]
        errs.append(np.abs(X - truth).max() / np.abs(truth).max())
        noisy.append(np.abs(honest_online_set_attack(run, j, fresh_noise=share_scale(1.0, 4.0, 3))[1] - truth).max() / np.abs(truth).max())
    assert len(errs) >= 6 and max(errs) < 1e-5 and np.median(noisy) > 0.5
    early = run_protocol(r, U, 1.0, reg=5.0, iters=5, scenario=3, p_online=0.5, seed=1)
    assert all(honest_online_set_attack(early, j)[1] is None for j in range(r.n_items))     # too few iterations: no estimate


# ---------------------------------------------------------------- the noise shares: one scale, Delta sqrt(d) / eps
def test_hua_sum_is_iid_laplace_per_coordinate_and_half_scale_rejected():
    k, d, eps, Delta = 6, 4, 0.8, 1.5
    b = Delta * math.sqrt(d) / eps
    shares = noise_shares(k, d, eps, Delta, seed=31, n=N)
    assert shares.shape == (N, k, d)
    eta = shares.sum(axis=1)
    for l in range(d):
        assert ks_p(eta[:, l], stats.laplace(scale=b).cdf) > ACCEPT
    assert independence_p(eta[:, 0], eta[:, 1]) > ACCEPT
    half = noise_shares(k, d, 2 * eps, Delta, seed=31, n=N).sum(axis=1)   # half the noise
    assert ks_p(half[:, 0], stats.laplace(scale=b).cdf) < REJECT
    # one user's share alone is a scale mixture with variance 2 b^2 / k per coordinate (far from the total)
    assert abs(shares[:, 0, 0].var() / (2 * b * b / k) - 1) < 0.05
    # H is shared: within an item, every share of coordinate l is sqrt(2 H[l]) * (Delta sqrt(d)/eps) * C_s[l]
    one = noise_shares(k, d, eps, Delta, seed=31)
    assert one.shape == (k, d)
    assert np.array_equal(one, noise_shares(k, d, eps, Delta, seed=31))


def test_hua_sum_is_not_the_l2_laplace_distribution():
    "Same guarantee, different law: the norm of Hua's sum is not Gamma(d, Delta / eps)."
    k, d, eps, Delta = 5, 5, 1.0, 1.0
    eta = noise_shares(k, d, eps, Delta, seed=32, n=N).sum(axis=1)
    assert ks_p(np.linalg.norm(eta, axis=1), stats.gamma(d, scale=Delta / eps).cdf) < REJECT


def test_hua_sum_privacy_loss_for_l2_sensitivity_Delta_is_epsilon_and_attained():
    """Privacy loss log p(eta) - log p(eta - v) of Hua's summed noise (Laplace(b) per coordinate, tested above) for
    shifts v with |v|_2 = Delta: never above eps, and equal to eps along (1, ..., 1) whenever all eta_l <= 0."""
    k, d, eps, Delta = 5, 7, 0.6, 2.0
    b, S = Delta * math.sqrt(d) / eps, Delta
    eta = noise_shares(k, d, eps, Delta, seed=33, n=20_000).sum(axis=1)
    V = np.random.default_rng(3).standard_normal((40, d)); V *= S / np.linalg.norm(V, axis=1, keepdims=True)
    worst = np.full(d, S / math.sqrt(d))                                   # |v|_1 = sqrt(d) |v|_2
    V = np.vstack([V, worst, -worst])
    loss = (np.abs(eta[:, None, :] - V[None]).sum(-1) - np.abs(eta).sum(-1)[:, None]) / b
    assert loss.max() <= eps + 1e-9
    assert np.isclose(loss[:, -2].max(), eps, rtol=1e-9)                  # attained (all eta_l <= 0 happens ~2^-7)
    assert loss[:, :-2].max() < eps                                          # generic directions: strictly less
    # the L2-Laplace with beta = Delta / eps: the same bound for the same shifts
    beta = S / eps
    eta2 = l2_laplace_noise(20_000, d, beta, seed=34)
    loss2 = (np.linalg.norm(eta2[:, None, :] - V[None], axis=-1) - np.linalg.norm(eta2, axis=1)[:, None]) / beta
    assert loss2.max() <= eps + 1e-9 and loss2.max() > 0.8 * eps


def test_conditional_mu_is_the_worst_mahalanobis_shift():
    "Given H, the sum is N(0, diag(2 b^2 H)); mu = max over |v|_2 <= Delta of |v|_Sigma^-1, at the smallest H."
    d, eps, Delta = 6, 0.8, 1.5
    b, S = Delta * math.sqrt(d) / eps, Delta
    H = np.random.default_rng(4).standard_exponential(d)
    mu = conditional_mu(H, eps, Delta)
    V = np.random.default_rng(5).standard_normal((10_000, d)); V *= S / np.linalg.norm(V, axis=1, keepdims=True)
    maha = np.sqrt((V ** 2 / (2 * b * b * H)).sum(axis=1))
    assert maha.max() <= mu * (1 + 1e-12) and maha.max() > 0.9 * mu
    e_min = np.zeros(d); e_min[np.argmin(H)] = S
    assert math.isclose(math.sqrt((e_min ** 2 / (2 * b * b * H)).sum()), mu, rel_tol=1e-12)
    # given H the noise is Gaussian, not Laplace: within one item the k shares of coordinate l are i.i.d.
    # N(0, 2 b^2 H_l / k); standardized by their own spread they are N(0, 1) (KS), and their kurtosis is 3, not 6
    k = 2000
    z = noise_shares(k, d, eps, Delta, seed=6) / (b * math.sqrt(2 / k))   # column l = sqrt(H_l) * N(0, 1)
    z = z / z.std(axis=0)
    assert ks_p(z.ravel(), stats.norm.cdf) > ACCEPT
    assert abs(stats.kurtosis(z.ravel(), fisher=False) - 3) < 0.3


def test_one_share_scale_for_the_decomposition_everywhere():
    "Delta sqrt(d)/eps (1/2-scaled loss) is the one scale: shares, protocol and sample_item_noise share one function."
    assert share_scale(0.8, 4.0, 9) == 4.0 * 3 / 0.8
    assert hua_protocol.share_scale is hua.share_scale                      # the protocol uses notebook 03's function
    eta = sample_item_noise(30_000, 4, 0.8, 4.0, noise="hua-decomposition", seed=3)
    assert np.array_equal(eta, laplace_noise((30_000, 4), share_scale(0.8, 4.0, 4), 3, np.float64))
    summed = noise_shares(5, 4, 0.8, 4.0, seed=7, n=30_000).sum(axis=1)    # the shares sum to the same law
    assert stats.ks_2samp(summed.ravel(), eta.ravel()).pvalue > ACCEPT
    assert stats.ks_2samp(2 * summed.ravel(), eta.ravel()).pvalue < REJECT    # the unscaled-loss factor 2 is detected


BAD_SHARES = [
    (lambda: noise_shares(0, 3, 1.0, 1.0), "k=0"),
    (lambda: noise_shares(3, 3, 1.0, -1.0), "Delta=-1.0"),
    (lambda: noise_shares(3, 0, 1.0, 1.0), "d=0"),
    (lambda: noise_shares(3, 3, 0.0, 1.0), "epsilon=0.0"),
    (lambda: conditional_mu(np.array([1.0, 0.0]), 1.0, 1.0), "H must be"),
]


@pytest.mark.parametrize("call,message", BAD_SHARES, ids=[m for _, m in BAD_SHARES])
def test_noise_shares_bad_input(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value)


def test_protocol_refuses_an_epsilon_whose_noise_the_codec_cannot_encode():
    "A tiny epsilon is named as the parameter to change, not the codec's bound (which the user never set)."
    from dpmf_lit.papers.hua_protocol import HuaProtocol
    from dpmf_lit.data import synthetic
    r = synthetic(n_users=40, n_items=10, n_ratings=300, seed=0)
    with pytest.raises(ValueError, match=r"^epsilon=1e-300 gives noise of scale .* raise epsilon"):
        HuaProtocol(epsilon=1e-300, d=2, epochs=1, pmf_epochs=1).fit(r)
