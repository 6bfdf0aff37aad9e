"""Mugdho & Imtiaz (dpmf_lit.papers.gauss): kernels against the paper's dense formulas, the noise against N(0, σ²),
clipping, the report against the toolkit's accountant, the sensitivity on neighbours, the paper's slice filter on
fixture files of ML-1M, Netflix and Anime, and bad input."""
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dpmf_lit.data import Ratings, load_anime, load_movielens_dat, load_netflix, synthetic
from dpmf_lit.papers.gauss import (GaussMF, clip_rows_kernel, gauss_epsilons, gauss_iteration, gauss_iteration_numpy, gauss_sigma,
                            mugdho_imtiaz_epsilon, mugdho_imtiaz_slice, neighbour_sensitivity, user_epsilon)
from dpmf_lit.core.privacy import (PrivacyAccountant, classic_noise_multiplier, dp_accounting_pld_epsilon,
                              dp_accounting_rdp_epsilon)
from dpmf_lit.core.stats import ACCEPT, REJECT, ks_p


def dense_problem(seed=0, nm=8, nu=11, n=4):
    rng = np.random.default_rng(seed)
    R = rng.random((nm, nu)) < 0.5
    V = np.where(R, rng.integers(1, 6, (nm, nu)), 0).astype(np.float32)
    item, user = (a.astype(np.int32) for a in np.nonzero(R))
    X = (2 * rng.standard_normal((nm, n))).astype(np.float32); T = (2 * rng.standard_normal((nu, n))).astype(np.float32)
    nX, nT = (rng.standard_normal(a.shape).astype(np.float32) for a in (X, T))
    return R, V, user, item, V[item, user], X, T, nX, nT


@pytest.mark.parametrize("clip", ["gradient", "profiles"])
@pytest.mark.parametrize("seed", [0, 1])
def test_kernels_equal_the_dense_formulas_and_numpy(seed, clip):
    R, V, user, item, r, X, T, nX, nT = dense_problem(seed)
    C, lam, mu = 1.5, 0.1, 0.01
    cl = lambda A: A / np.maximum(1, np.linalg.norm(A, axis=1) / C)[:, None]
    sX = np.linspace(0.5, 1, len(X)).astype(np.float32); sT = np.linspace(1, 2, len(T)).astype(np.float32)
    E = (X @ T.T) * R - V                                            # Algorithm 1, line 3 (V̂ - V with the mask)
    Xr = X - mu * sX[:, None] * (E @ cl(T) + lam * X + nX)           # lines 4, 8
    Tr = T - mu * sT[:, None] * (E.T @ cl(X) + lam * T + nT)         # lines 5, 7, 9
    if clip == "profiles": Xr, Tr = cl(Xr), cl(Tr)
    X1, T1 = X.copy(), T.copy()
    sse = gauss_iteration(user, item, r, X1, T1, lam, C, mu, nX, nT, sX, sT, tuple(np.empty_like(a) for a in (X, T, X, T)), clip)
    X2, T2, sse2 = gauss_iteration_numpy(user, item, r, X, T, lam, C, mu, nX, nT, sX, sT, clip)
    for A in (X1, X2): np.testing.assert_allclose(A, Xr, rtol=1e-5, atol=1e-5)
    for A in (T1, T2): np.testing.assert_allclose(A, Tr, rtol=1e-5, atol=1e-5)
    assert math.isclose(sse, (E ** 2).sum(), rel_tol=1e-4) and math.isclose(sse2, (E ** 2).sum(), rel_tol=1e-4)


def test_clipping_bounds_each_rows_contribution():
    A = (np.random.default_rng(0).standard_normal((500, 6)) * 3).astype(np.float32)
    out = np.empty_like(A); clip_rows_kernel(A, 1.0, out)
    norms = np.linalg.norm(out, axis=1)
    assert norms.max() <= 1 + 1e-5
    small = np.linalg.norm(A, axis=1) <= 1
    np.testing.assert_array_equal(out[small], A[small])              # rows inside the ball are untouched
    # one rating's change moves ∇Θ by (v' - v) x̄_i: norm <= τC at the first iteration, whatever the data
    r = synthetic(200, 100, 4000, seed=3)
    k = int(np.argmax(r.rating)); s = neighbour_sensitivity(GaussMF(n=5, J=1, seed=0), r, k, 1.0)
    assert s[0] <= (r.rating[k] - 1.0) * 1.0 * (1 + 1e-5)


def zero_residual_ratings(m: GaussMF, base: Ratings) -> Ratings:
    X, T = m.init_profiles(base)
    v = np.einsum("kd,kd->k", X[base.item], T[base.user]).astype(np.float32)
    return Ratings(base.user, base.item, v, base.n_users, base.n_items, -10.0, 10.0, "zero residuals")


@pytest.mark.parametrize("variant", ["paper", "both"])
def test_the_noise_is_gaussian_with_the_stated_sigma(variant):
    base = synthetic(2000, 300, 20_000, seed=4)
    m = GaussMF(epsilon_i=0.5, n=5, J=1, mu=1.0, lam=0.0, variant=variant, seed=7)
    r = zero_residual_ratings(m, base)
    X0, T0 = m.init_profiles(r)
    fit = m.fit(r)
    sigma = gauss_sigma(0.5, 0.01, 20.0, 1.0)
    assert math.isclose(sigma, 20.0 * math.sqrt(2 * math.log(1.25 / 0.01)) / 0.5)
    eta = -(fit.U - T0).ravel()                                       # 10,000 draws of the Θ noise
    assert ks_p(eta, stats.norm(0, sigma).cdf) > ACCEPT
    assert ks_p(eta, stats.norm(0, sigma / 2).cdf) < REJECT          # half σ is rejected
    assert ks_p(eta, stats.norm(0, sigma * 1.1).cdf) < REJECT
    etaX = -(fit.V - X0).ravel()
    if variant == "paper": assert np.abs(etaX).max() < 1e-3           # X gets no noise
    else: assert ks_p(etaX, stats.norm(0, sigma).cdf) > ACCEPT and ks_p(etaX, stats.norm(0, sigma / 2).cdf) < REJECT


def test_fresh_noise_each_iteration():
    base = synthetic(500, 100, 5_000, seed=5)
    m = GaussMF(n=4, J=2, mu=1.0, lam=0.0, seed=1)
    r = zero_residual_ratings(m, base)
    T0 = m.init_profiles(r)[1]
    one = GaussMF(n=4, J=1, mu=1.0, lam=0.0, seed=1, tau=20.0).fit(r).U - T0
    two = m.fit(r).U - T0
    assert np.corrcoef(one.ravel(), (two - one).ravel())[0, 1] < 0.2   # the second step's noise is new


@pytest.mark.parametrize("variant,per_step", [("paper", 1), ("both", 2)])
@pytest.mark.parametrize("accounting", ["tight", "rdp", "closed_form"])
def test_report_equals_the_toolkit_accountant_for_the_J_run(variant, per_step, accounting):
    r = synthetic(300, 120, 6000, seed=6)
    fit = GaussMF(n=3, J=500, epsilon_i=0.3, tol=1e-3, variant=variant, accounting=accounting).fit(r)
    J_run = fit.params["epochs_run"]
    assert 1 <= J_run < 500 and len(fit.history) == J_run             # the stopping rule ran fewer and recorded it
    z = classic_noise_multiplier(0.3, 0.01)
    want = {"tight": PrivacyAccountant(neighbouring="replace").gaussian(z, J_run * per_step).epsilon(1e-5, "pld")[0],
            "rdp": dp_accounting_rdp_epsilon(z, J_run * per_step, 1e-5),
            "closed_form": mugdho_imtiaz_epsilon(J_run * per_step, 0.3, 0.01, 1e-5)}[accounting]
    got = fit.privacy.epsilon if variant == "both" else fit.privacy.epsilon_claimed   # the paper's variant: no guarantee, a claim
    assert math.isclose(got, want, rel_tol=2e-3)
    assert fit.privacy.coverage == ("conditional" if variant == "both" else "none") and fit.privacy.unit == "rating"   # tol chose J
    if variant == "both": assert fit.privacy.condition.startswith(f"given the {J_run} iterations run")
    assert fit.privacy.delta == (1e-5 if variant == "both" else None)
    assert fit.privacy.released == (("U",) if variant == "paper" else ("U", "V"))
    for word in ("closed form", "RDP", "tight"): assert word in fit.privacy.notes


def test_three_epsilons_are_ordered_and_match_dp_accounting():
    for J, e in ((1, 0.1), (300, 0.4), (1000, 0.9)):
        three = gauss_epsilons(J, e, 0.01, 1e-5)
        z = classic_noise_multiplier(e, 0.01)
        assert three["tight"] <= three["rdp"] <= three["closed_form"]
        assert math.isclose(three["rdp"], dp_accounting_rdp_epsilon(z, J, 1e-5), rel_tol=1e-9)
        assert math.isclose(three["tight"], dp_accounting_pld_epsilon(z, J, 1e-5), rel_tol=2e-3)
    assert user_epsilon(200, 300, 0.4, 0.01, 1e-5) > 100 * user_epsilon(1, 300, 0.4, 0.01, 1e-5)


def test_the_repairs_step_is_one_gaussian_of_multiplier_z_over_sqrt2():
    "Noise σ on both gradients, joint sensitivity √2τC: one release of multiplier z/√2 per step = two of multiplier z."
    for J, e in ((1, 0.2), (300, 0.4)):
        z = classic_noise_multiplier(e, 0.01)
        two = gauss_epsilons(J, e, 0.01, 1e-5, per_step=2)
        assert math.isclose(two["tight"], dp_accounting_pld_epsilon(z / math.sqrt(2), J, 1e-5), rel_tol=2e-3)
        assert math.isclose(two["rdp"], dp_accounting_rdp_epsilon(z / math.sqrt(2), J, 1e-5), rel_tol=1e-6)
        rho, L = J / (2 * (z / math.sqrt(2)) ** 2), math.log(1e5)                 # Eq. 9 with σ/Δ = z/√2
        assert math.isclose(two["closed_form"], rho + 2 * math.sqrt(rho * L), rel_tol=1e-9)
        assert two["tight"] > gauss_epsilons(J, e, 0.01, 1e-5)["tight"] * 1.2


def test_scope_names_what_the_accounting_does_not_cover():
    r = synthetic(200, 100, 4000, seed=2)
    for v in ("paper", "both"):
        scope = GaussMF(n=3, J=2, variant=v).fit(r).privacy.scope
        assert "history" in scope and "tol" in scope and "rating pattern is public" in scope
    assert "composition over the J steps is not covered" in GaussMF(n=3, J=2).fit(r).privacy.scope


def test_sensitivity_fails_for_the_paper_and_holds_for_the_repair():
    r = synthetic(400, 300, 20_000, seed=0)
    top = np.bincount(r.item, minlength=r.n_items).argmax()
    k = int(np.flatnonzero((r.item == top) & (r.rating == r.rating_max))[0])
    paper = neighbour_sensitivity(GaussMF(mu=0.002, J=150, seed=0), r, k, 1.0)
    both = neighbour_sensitivity(GaussMF(mu=0.002, J=150, variant="both", seed=0), r, k, 1.0)
    assert math.isclose(paper[0], 4.0, rel_tol=1e-4) and paper.max() > 4.0 * 1.01
    assert both.max() <= 4.0 * math.sqrt(2) * (1 + 1e-5)
    assert math.isclose(both[0], 4.0 * math.sqrt(2), rel_tol=1e-4)   # the bound is reached: √2τC is not loose


def test_non_private_baseline_has_no_noise_and_no_guarantee():
    r = synthetic(200, 100, 4000, seed=2)
    a = GaussMF(n=3, J=5, private=False, seed=0).fit(r)
    assert not a.privacy.private and "step_epsilon" not in a.params and "delta" not in a.params   # no budget is listed
    with pytest.raises(ValueError, match="epsilon_i=0.1: gauss with private=False does not use"):   # a budget it would ignore
        GaussMF(n=3, J=5, private=False, seed=0, epsilon_i=0.1)


@pytest.mark.parametrize("kw,message", [
    (dict(epsilon_i=0), "epsilon_i=0"), (dict(epsilon_i=-0.1), "epsilon_i=-0.1"), (dict(epsilon_i=1.0), "epsilon_i=1"),
    (dict(epsilon_i=1e-320), None), (dict(delta=0), "delta=0"), (dict(delta=1.0), "delta=1"),
    (dict(delta_r=0), "delta_r=0"), (dict(delta_r=2), "delta_r=2"), (dict(C=0), "C=0"), (dict(C=-1), "C=-1"),
    (dict(J=0), "J=0"), (dict(J=2.5), "J=2.5"), (dict(mu=0), "mu=0"), (dict(mu=-1e-3), "mu=-0.001"), (dict(n=0), "n=0"),
    (dict(tau=0), "tau=0"), (dict(variant="x"), "variant='x'"), (dict(clip="rows"), "clip='rows'"),
    (dict(accounting="pure"), "accounting='pure'"), (dict(normalize="yes"), "normalize='yes'")])
def test_bad_input_is_named(kw, message):
    if message is None:                       # a denormal ε_i: refused by name, or a finite model; never NaN
        try: fit = GaussMF(n=2, J=2, **kw).fit(synthetic(50, 30, 500, seed=0))
        except ValueError as e: assert "epsilon_i=1e-320 is extreme: raise it" in str(e); return
        assert np.isfinite(fit.U).all(); return
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        GaussMF(**kw)


def test_bad_input_of_the_helpers():
    with pytest.raises(ValueError, match="tau=-1"): gauss_sigma(0.5, 0.01, -1)
    with pytest.raises(ValueError, match="per_step=0"): gauss_epsilons(10, 0.5, 0.01, 1e-5, per_step=0)
    r = synthetic(50, 30, 500, seed=0)
    with pytest.raises(ValueError, match="k=500"): neighbour_sensitivity(GaussMF(J=1), r, 500, 1.0)
    with pytest.raises(ValueError, match="new_value=9"): neighbour_sensitivity(GaussMF(J=1), r, 0, 9.0)


# ------------------------------------------------------------- the paper profile's data, on fixture files
def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True); path.write_text(text); return path


def counts_fixture(rng, n_users, n_items, per_user, rare=5):
    "A (user, item) list where user u rates per_user[u] random items of n_items, plus `rare` items rated once each."
    pairs = [(u, i) for u in range(n_users) for i in rng.choice(max(n_items, per_user[u]), per_user[u], replace=False)]
    return pairs + [(u, 3000 + u) for u in range(rare)]


def check_slice(s: Ratings, min_item=101):
    uc, ic = np.bincount(s.user), np.bincount(s.item)
    assert uc.min() >= 200 and uc.max() <= 2500 and ic.min() >= min_item


def test_slice_on_a_netflix_fixture(tmp_path):
    rng = np.random.default_rng(0)
    per_user = np.r_[rng.integers(201, 260, 250), rng.integers(5, 100, 40), [2600, 2601]]    # some too few, two too many
    pairs = counts_fixture(rng, len(per_user), 300, per_user)
    by_item = {}
    for u, i in pairs: by_item.setdefault(i, []).append(u)
    text = "".join(f"{i + 1}:\n" + "".join(f"{u + 10},{rng.integers(1, 6)},2005-01-01\n" for u in us) for i, us in sorted(by_item.items()))
    r = load_netflix(write(tmp_path / "combined_data_1.txt", text))
    s = mugdho_imtiaz_slice(r)
    check_slice(s)
    assert 0 < s.n_users <= 250 and s.n_users < r.n_users and s.n_items < r.n_items
    sub = mugdho_imtiaz_slice(r, n_users=280, seed=1)                 # a seeded user draw first
    assert sub.n_users <= s.n_users
    fit = GaussMF(n=3, J=3).fit(s)                                     # the paper profile's mechanism runs on it
    assert fit.privacy.epsilon_claimed > 0 and "tau=4" in fit.privacy.notes


def test_slice_on_an_anime_fixture_drops_unrated(tmp_path):
    rng = np.random.default_rng(1)
    per_user = rng.integers(205, 300, 250)
    pairs = counts_fixture(rng, len(per_user), 300, per_user)
    lines = [f"{u},{i},{-1 if rng.random() < 0.1 else rng.integers(1, 11)}" for u, i in pairs]
    r = load_anime(write(tmp_path / "rating.csv", "user_id,anime_id,rating\n" + "\n".join(lines) + "\n"))
    assert r.rating.min() >= 1 and r.rating_max == 10 and len(r) < len(lines)   # the -1 rows are gone
    s = mugdho_imtiaz_slice(r)
    check_slice(s)
    assert "tau=9" in GaussMF(n=3, J=2).fit(s).privacy.notes             # τ = 10 - 1 on AnimeReco


def test_movielens_1m_fixture_is_used_whole(tmp_path):
    rng = np.random.default_rng(2)
    pairs = counts_fixture(rng, 60, 80, rng.integers(20, 60, 60))
    text = "".join(f"{u + 1}::{i + 1}::{rng.integers(1, 6)}::978300760\n" for u, i in pairs)
    r = load_movielens_dat(write(tmp_path / "ratings.dat", text))
    assert len(r) == len(pairs)                                       # the paper filters only Netflix and AnimeReco
    fit = GaussMF(n=3, J=3).fit(r)
    assert fit.U.shape == (r.n_users, 3)


# ------------------------------------------------------------- paper-profile entries, end to end on fixtures
@pytest.mark.slow
def test_paper_profile_entries_run_on_fixtures(tmp_path, monkeypatch):
    "The manifest's paper entries for Figs. 1-3 on ML-1M, Netflix and AnimeReco, run by `reproduce` on fixture files."
    import json, shutil
    from dpmf_lit.data import ratings_sha256
    from dpmf_lit.records.provenance import load_results
    from dpmf_lit.batch.reproduce import reproduce
    from dpmf_lit.core.settings import load_settings
    repo = Path(__file__).resolve().parents[1] / "nbs" / "experiments"
    rng, data = np.random.default_rng(3), tmp_path / "data"
    ml = counts_fixture(rng, 40, 60, rng.integers(20, 50, 40))
    write(data / "ml-1m" / "ml-1m" / "ratings.dat", "".join(f"{u + 1}::{i + 1}::{rng.integers(1, 6)}::978300760\n" for u, i in ml))
    nf, by_item = counts_fixture(rng, 230, 300, rng.integers(201, 240, 230)), {}
    for u, i in nf: by_item.setdefault(i, []).append(u)
    for i, us in by_item.items():                                   # the training_set layout: one file per movie
        write(data / "netflix" / "training_set" / f"mv_{i + 1:07d}.txt", f"{i + 1}:\n" + "".join(f"{u + 1},{rng.integers(1, 6)},2005-01-01\n" for u in us))
    an = counts_fixture(rng, 230, 300, rng.integers(205, 240, 230))
    write(data / "anime" / "rating.csv", "user_id,anime_id,rating\n" + "".join(f"{u + 1},{i + 1},{rng.integers(1, 11)}\n" for u, i in an))
    base = load_settings(data_dir=data)
    from dpmf_lit.data import load_dataset
    for name in ("ml-1m", "netflix", "anime"):
        key = name.upper().replace("-", "_")
        r = load_dataset(name, settings=base, verify=False, **({"keep_unrated": True} if name == "anime" else {}))
        monkeypatch.setenv(f"DPMF_{key}_N_RATINGS", str(len(r))); monkeypatch.setenv(f"DPMF_{key}_SHA256", ratings_sha256(r))
    doc = json.loads((repo / "manifest.json").read_text())
    entries = [e for e in doc["entries"] if e["id"] in ("gauss-rmse-iterations", "gauss-rmse-iterations-netflix", "gauss-rmse-iterations-anime")]
    for e in entries:
        p = e["profiles"]["paper"]["parameters"]
        if "slice_users" in p: p["slice_users"] = 225          # the paper draws 40,000 of 480,189 users; the fixture has 230
        e["profiles"] = {"paper": e["profiles"]["paper"]}
    exp = tmp_path / "exp"; exp.mkdir()
    shutil.copy(repo / "gauss_rmse_iterations.ipynb", exp)
    (exp / "manifest.json").write_text(json.dumps({"description": "fixture run", "entries": entries}))
    monkeypatch.setenv("DPMF_DATA_DIR", str(data))
    s = load_settings(figures_dir=tmp_path / "figures", build_dir=tmp_path / "build", results_file=tmp_path / "figures" / "results.json",
                      manifest=exp / "manifest.json", data_dir=data)
    summary = reproduce(profile="paper", settings=s, progress=False)
    assert summary.exit_code == 0, str(summary)
    res = load_results(s.results_file)
    assert set(res) == {e["id"] for e in entries}
    assert "mugdho-imtiaz" in res["gauss-rmse-iterations-netflix"]["numbers"]["dataset"]
    assert "mugdho-imtiaz" in res["gauss-rmse-iterations-anime"]["numbers"]["dataset"]
    assert (s.figures_dir / "gauss" / "gauss_rmse_iterations_anime.png").is_file()
