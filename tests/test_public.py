"""Public item features (nbs/13_public_features.ipynb): the release-nothing floor `user-features`, `dp-bias-features`
(dp-bias's offsets on the device, with an optional private prior), and DPALS with collective MF: reports, calibration,
sensitivities measured through the package's own code, bad input, and the command line."""
import json, math, subprocess, sys

import numpy as np
import pytest

from dpmf_lit.papers.baselines import bias_sensitivity, release_item_totals
from dpmf_lit.data import synthetic
from dpmf_lit.model.mechanism import get_mechanism
from dpmf_lit.model.mf import evaluate
from dpmf_lit.core.privacy import gaussian_epsilon, gaussian_sigma_analytic
from dpmf_lit.papers.public import DPBiasFeatures, UserFeatures, local_ridge, public_features, release_prior, split_multipliers
from dpmf_lit.data.ratings import ItemFeatures, Ratings


@pytest.fixture(scope="module")
def data():
    r = synthetic(400, 150, 12000, seed=3)
    if r.item_features is None:       # features drawn independently of the ratings, so the test does not depend on the generator
        rng = np.random.default_rng(0)
        r = r.with_features(ItemFeatures((rng.random((r.n_items, 6)) < 0.3).astype(np.float32), tuple(f"f{k}" for k in range(6)),
                                         np.ones(r.n_items, bool), "test"))
    return r


def test_user_features_releases_nothing_and_beats_an_intercept_only_fit(data):
    m = UserFeatures().fit(data)
    assert (m.privacy.epsilon, m.privacy.delta, m.privacy.released, m.privacy.coverage) == (0.0, 0.0, (), "end-to-end")
    assert m.V.shape[1] == data.item_features.X.shape[1]
    with pytest.raises(ValueError, match="user-features needs public item features"):   # no features: refused, not an intercept alone
        UserFeatures().fit(data.with_features(None))


def test_local_ridge_matches_numpy_for_every_user(data):
    X = public_features(data)
    W, a = local_ridge(data, X, np.zeros(data.n_items), 3.0, 4.0, 0.5)
    for u in (0, 17, 399):
        mine = data.user == u
        Z = np.c_[np.ones(mine.sum()), X[data.item[mine]]]
        P = np.diag(np.r_[0.5, np.full(X.shape[1], 4.0)])
        ref = np.linalg.solve(Z.T @ Z + P, Z.T @ (data.rating[mine] - 3.0))
        np.testing.assert_allclose(np.r_[a[u], W[u]], ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("share", [0.0, 0.1, 0.5])
def test_dp_bias_features_is_calibrated_to_the_target(share):
    z1, z2 = split_multipliers(1.0, 1e-5, share)
    mu = math.sqrt(z1 ** -2 + (0 if math.isinf(z2) else z2 ** -2))
    assert math.isclose(gaussian_epsilon(1 / mu, 1e-5), 1.0, rel_tol=1e-6)
    assert math.isclose(1 / mu, gaussian_sigma_analytic(1.0, 1e-5), rel_tol=1e-9)


def _replace_user(data, u, rng):
    mine = data.user == u
    items = rng.choice(data.n_items, mine.sum(), replace=False).astype(np.int32)
    item, rating = data.item.copy(), data.rating.copy()          # in place: every other rating keeps its position (and its trimming key)
    item[mine], rating[mine] = items, rng.choice([1.0, 5.0], mine.sum()).astype(np.float32)
    return Ratings(data.user, item, rating, data.n_users, data.n_items, data.rating_min, data.rating_max, item_features=data.item_features)


def test_sensitivities_measured_through_the_package_code_never_exceed_the_bounds(data):
    rng = np.random.default_rng(5)
    tau = 10
    def totals(d):
        S, C, _ = release_item_totals(d, 3.0, tau, 0.0, np.random.default_rng(0), np.random.default_rng(1))
        return np.r_[S / 2.0, C]
    def prior_sum(d, B=0.5):
        W0, a0 = local_ridge(d, public_features(d), np.zeros(d.n_items), 3.0, 10.0, 0.5)
        return release_prior(np.c_[a0, W0], B, 0.0, np.random.default_rng(0))
    base_t, base_p, seen_t, seen_p = totals(data), prior_sum(data), 0.0, 0.0
    for u in rng.choice(data.n_users, 25, replace=False):
        other = _replace_user(data, u, rng)
        seen_t = max(seen_t, np.linalg.norm(totals(other) - base_t))
        seen_p = max(seen_p, np.linalg.norm(prior_sum(other) - base_p))
    assert seen_t <= bias_sensitivity(tau) + 1e-9 and seen_p <= 2 * 0.5 + 1e-6
    assert seen_t > 0.5 * bias_sensitivity(tau) and seen_p > 0.5    # the pairs move the releases: the check is not vacuous


def test_dp_bias_features_report_bad_input_and_determinism(data):
    m = DPBiasFeatures(epsilon=2.0, prior_share=0.2, seed=1).fit(data)
    assert m.privacy.epsilon == 2.0 and m.privacy.coverage == "end-to-end" and set(m.privacy.released) == {"item_bias", "prior"}
    assert "2 Gaussian releases" in m.privacy.method
    assert DPBiasFeatures(seed=1).fit(data).privacy.released == ("item_bias",)
    again = DPBiasFeatures(epsilon=2.0, prior_share=0.2, seed=1).fit(data)
    assert np.array_equal(m.U, again.U) and np.array_equal(m.item_bias, again.item_bias)
    for bad, msg in ((dict(prior_share=1.0), "prior_share=1"), (dict(max_norm=0.0), "max_norm=0"), (dict(epsilon=-1.0), "epsilon=-1")):
        with pytest.raises(ValueError, match=msg): DPBiasFeatures(**bad)


def test_with_almost_no_noise_the_released_offsets_beat_the_floor(data):
    from dpmf_lit.studies.compare import three_way_split
    tr, va, te = three_way_split(data, 0)
    floor = evaluate(UserFeatures().fit(tr), te)["rmse"]
    loose = np.mean([evaluate(DPBiasFeatures(epsilon=1e6, seed=s).fit(tr), te)["rmse"] for s in range(2)])
    assert loose < floor       # with (almost) no noise the released offsets add what the bias model knows


def test_dpals_with_public_features_keeps_its_report_and_default(data):
    D = get_mechanism("dpals")
    plain, cmf = D(seed=0, d=2).fit(data), D(seed=0, d=2, feature_weight=100.0, local_features=True).fit(data)
    assert plain.privacy.epsilon == cmf.privacy.epsilon == 1.0 and cmf.privacy.method == plain.privacy.method
    assert cmf.V.shape[1] == 2 + data.item_features.X.shape[1] and plain.V.shape[1] == 2
    np.testing.assert_array_equal(cmf.V[:, 2:], data.item_features.X)   # the public part of V is the features themselves


def test_dpals_refuses_public_features_on_ratings_without_them(data):
    from dataclasses import replace
    bare, D = replace(data, item_features=None), get_mechanism("dpals")
    for params, name in (({"feature_weight": 100.0}, "feature_weight=100.0"), ({"local_features": True}, "local_features=True")):
        with pytest.raises(ValueError, match=f"^{name} needs public item features, and the ratings .* have none"):
            D(seed=0, d=2, **params).fit(bare)
    assert D(seed=0, d=2).fit(bare).V.shape[1] == 2      # the default needs none


def test_command_line_user_features_prints_a_zero_report():
    p = subprocess.run([sys.executable, "-m", "dpmf_lit.cli.main", "fit", "user-features", "--dataset", "ml-100k", "--json"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["privacy"]["epsilon"] == 0 and out["privacy"]["delta"] == 0 and out["rmse"] < 1.0


def test_the_fit_adds_the_noise_its_report_states(data, monkeypatch):
    "Halving either noise scale, or the prior's sensitivity 2B, in the fit itself is caught: the item totals get sigma = z1·Δ, the prior's sd is z2·2B/n."
    import dpmf_lit.papers.public as P
    seen = []
    real = P.release_item_totals
    monkeypatch.setattr(P, "release_item_totals", lambda *a, **k: (seen.append(a[3]), real(*a, **k))[1])
    eps, share, tau, B = 1.0, 0.3, 20, 0.5
    z1, z2 = split_multipliers(eps, 1e-5, share)
    priors = np.array([DPBiasFeatures(epsilon=eps, prior_share=share, max_ratings=tau, max_norm=B, seed=s).fit(data).history[0]["prior"]
                       for s in range(300)])
    assert all(math.isclose(s, z1 * bias_sensitivity(tau), rel_tol=1e-12) for s in seen)
    sd, expected = priors.std(axis=0, ddof=1), z2 * 2 * B / data.n_users
    assert np.all(np.abs(sd / expected - 1) < 0.2), (sd, expected)   # 300 draws: the sd within ±20 % (a halved scale is -50 %)


def _elsewhere(data, listed=7, source="nomatch.csv"):
    "The same ratings with features that describe none of their items (another data set's ids)."
    from dataclasses import replace
    return data.with_features(replace(data.item_features, known=np.zeros(data.n_items, bool), listed=listed, source=source))


@pytest.mark.parametrize("name, params", [("user-features", {}), ("dp-bias-features", {"seed": 0}),
                                          ("dpals", {"seed": 0, "local_features": True}), ("dpals", {"seed": 0, "feature_weight": 10.0})])
def test_feature_mechanisms_refuse_ratings_without_a_usable_feature(data, name, params):
    "None attached, no column, none of the rated items described: each refused before any work, naming the file; no matched count."
    M = get_mechanism(name)
    with pytest.raises(ValueError, match=r"needs public item features, and the ratings .* have none: attach them"):
        M(**params).fit(data.with_features(None))
    with pytest.raises(ValueError, match=r"needs public item features, and none of the 7 items listed in nomatch.csv is among the rated items"):
        M(**params).fit(_elsewhere(data))
    empty = ItemFeatures(np.zeros((data.n_items, 0), np.float32), (), np.ones(data.n_items, bool), "blank.csv", 3)
    with pytest.raises(ValueError, match="blank.csv gives the ratings .* no feature column"):
        M(**params).fit(data.with_features(empty))
    half = data.item_features.known.copy(); half[::2] = False           # some items described: it fits
    from dataclasses import replace
    assert M(**params).fit(data.with_features(replace(data.item_features, known=half))).privacy is not None


def test_the_work_estimate_counts_the_feature_columns(data, monkeypatch):
    "2,000 feature columns on MovieLens 100K's shape: well past ten minutes; announced (or refused past weeks) naming the file."
    import warnings
    from dpmf_lit.model import mechanism
    from dpmf_lit.model.mechanism import FEATURE_WORK, LONG_WORK, MAX_WORK, LongFitWarning
    shape = Ratings(np.repeat(np.arange(943, dtype=np.int32), 106), np.zeros(943 * 106, np.int32), np.ones(943 * 106, np.float32),
                    943, 1682, 1, 5, item_features=ItemFeatures(np.zeros((1682, 2000), np.float32), tuple(map(str, range(2000))),
                                                                  np.ones(1682, bool), "wide.csv"))
    for M, params in ((UserFeatures, {}), (DPBiasFeatures, {}), (get_mechanism("dpals"), {"local_features": True})):
        w = M(**params).work(shape)
        assert LONG_WORK < w[FEATURE_WORK] < MAX_WORK and w[FEATURE_WORK] > sum(w.values()) / 2, (M, w)
        assert M(**params).work(data)[FEATURE_WORK] < 1e-3 * LONG_WORK         # a few columns: nothing to say
    assert FEATURE_WORK not in get_mechanism("dpals")().work(shape)             # the default does not regress on them
    wide = data.with_features(ItemFeatures(np.ones((data.n_items, 40), np.float32), tuple(map(str, range(40))),
                                           np.ones(data.n_items, bool), "wide.csv"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        UserFeatures().fit(data)                                                # a few columns: said nothing
    monkeypatch.setattr(mechanism, "LONG_WORK", 1e6)
    with pytest.warns(LongFitWarning, match="user-features: the 40 public item features of wide.csv enter every user's solve"):
        UserFeatures().fit(wide)
    monkeypatch.setattr(mechanism, "MAX_WORK", 1e7)
    with pytest.raises(ValueError, match=r"the 40 public item features of wide.csv .* \(weeks of computing\): keep fewer feature columns"):
        DPBiasFeatures(seed=0).fit(wide)


def test_command_line_names_the_item_file_that_matches_no_rated_item(tmp_path):
    rows = "".join(f"{u},{i},{(u * i) % 5 + 1}\n" for u in range(1, 40) for i in range(1, 30))
    (tmp_path / "r.csv").write_text(rows)
    (tmp_path / "nomatch.csv").write_text("id,g\n" + "".join(f"{k},{k % 3}\n" for k in range(1000, 1007)))
    for mech in ("user-features", "dp-bias-features"):
        p = subprocess.run([sys.executable, "-m", "dpmf_lit.cli.main", "fit", mech, "--dataset", str(tmp_path / "r.csv"), "--scale", "1,5",
                            "--item-features", str(tmp_path / "nomatch.csv")], capture_output=True, text=True, timeout=600)
        assert p.returncode == 2 and p.stdout == "", (p.stdout, p.stderr)
        assert (f"dpmf: error: {mech} needs public item features, and none of the 7 items listed in {tmp_path / 'nomatch.csv'} "
                "is among the rated items") in p.stderr, p.stderr
