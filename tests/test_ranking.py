"""The ranking task (nbs/00j_ranking, 00k_implicit, 01f_fold_in, 10a_dpals_implicit, 11c_compare_ranking): the ranking
mechanisms pass the meter through their own code path, and every privacy bug written into their source is caught by it."""
import json, os, subprocess, sys
import numpy as np
import pytest
from dpmf_lit.data.implicit import binarize, new_user_split
from dpmf_lit.data.synthetic import synthetic
from dpmf_lit.studies.mutants import Mutant, mutated
from dpmf_lit.studies.ranking import RANKING_METER, compare_ranking, meter_ranking, ranking_record

I, F = "dpmf_lit.papers.dpals_implicit", "dpmf_lit.model.fold_in"
RANKING_MUTANTS = (
    Mutant("dpals-implicit", "noise on the Gram matrices halved", f"{I}:release_statistics", "gaussian_release(A, sigma_A,", "gaussian_release(A, sigma_A / 2,"),
    Mutant("dpals-implicit", "noise on the right-hand sides halved", f"{I}:release_statistics", "gaussian_release(beta, sigma_beta,", "gaussian_release(beta, sigma_beta / 2,"),
    Mutant("dpals-implicit", "noise on the global Gram halved", f"{I}:release_statistics", "gaussian_release(G, sigma_A,", "gaussian_release(G, sigma_A / 2,"),
    Mutant("dpals-implicit", "the global Gram released without noise", f"{I}:release_statistics", "gaussian_release(G, sigma_A, rng, \"global Gram G\", symmetric=True)", "G"),
    Mutant("dpals-implicit", "user rows not clipped", f"{I}:ImplicitDPALS._fit", "clip_rows(U, self.max_norm)", "U"),
    Mutant("dpals-implicit", "trimming to τ positives a user ignored", f"{I}:ImplicitDPALS._fit",
           "kept[on] = keep_mask(train.user[on], self.max_ratings, self.rng(3), train.n_users, item=train.item[on])", "kept[on] = True"),
    Mutant("dpals-implicit", "add/remove sensitivity without the global Gram, √(2τ)", f"{I}:implicit_sensitivity", "2 * tau + 1 if add", "2 * tau if add"),
    Mutant("dpals-implicit", "rounds not composed: each calibrated as if it were the only release", f"{I}:ImplicitDPALS._fit",
           "round_multiplier(self.epsilon, self.delta, self.epochs)", "round_multiplier(self.epsilon, self.delta, 1)"),
    Mutant("dpals-implicit", "the noise seed fixed (the noise is public)", f"{I}:ImplicitDPALS._fit", "self.rng(5)", "np.random.default_rng(0)"),
    Mutant("dpals-implicit", "noise on the counts of the frequent items halved", f"{I}:ImplicitDPALS.trained_items", "z0 * popularity_sensitivity", "z0 / 2 * popularity_sensitivity"),
    Mutant("dpals-implicit", "frequent items chosen from the exact counts", f"{I}:ImplicitDPALS.trained_items", "np.argsort(-noisy,", "np.argsort(-counts,"),
    Mutant("dp-popularity", "noise on the counts halved", f"{I}:DPPopularity._fit", "z * popularity_sensitivity", "z / 2 * popularity_sensitivity"),
    Mutant("dp-popularity", "trimming to τ positives a user ignored", f"{I}:DPPopularity._fit",
           "keep_mask(train.user, self.max_ratings, self.rng(3), train.n_users, item=train.item)", "np.ones(len(train), np.bool_)"),
    Mutant("dp-popularity", "add/remove sensitivity taken as √(τ/2)", f"{I}:popularity_sensitivity", "math.sqrt(tau if", "math.sqrt(tau / 2 if"),
    Mutant("dp-popularity", "the noise seed fixed (the noise is public)", f"{I}:DPPopularity._fit", "self.rng(5)", "np.random.default_rng(0)"),
)


def _selection_problems() -> list:
    "Given the same releases, the frequent items must not depend on the data: a pair whose exact counts would flip the one item chosen."
    from dpmf_lit.data import Ratings
    from dpmf_lit.papers.dpals_implicit import ImplicitDPALS
    from dpmf_lit.studies.meter import logged_fit
    make = lambda u, i: Ratings(np.array(u, np.int32), np.array(i, np.int32), np.ones(len(u), np.float32), 5, 3, 0.0, 1.0, name="flip").validate()
    D, D2 = make([0, 1, 2, 4, 3, 3], [0, 0, 1, 1, 1, 2]), make([0, 1, 2, 4], [0, 0, 1, 1])    # exact counts: item 1 leads with user 3; a tie (item 0) without
    mech = ImplicitDPALS(max_ratings=3, d=1, epochs=1, max_norm=1e-3, neighbouring="add_remove", item_fraction=0.3, count_share=0.5, seed=0)   # one item of three
    ma, la = logged_fit(mech, D); mb, _ = logged_fit(mech, D2, replay=la)
    same = np.array_equal(np.abs(ma.V).sum(1) > 0, np.abs(mb.V).sum(1) > 0)
    return [] if same else ["the items trained on differ between D and D′ given the same releases"]


def _problems(name):
    extra = _selection_problems() if name == "dpals-implicit" else []
    return extra + [p for params in RANKING_METER[name] for p in meter_ranking(name, params, seeds=(0, 1)).problems]


@pytest.mark.parametrize("name", sorted(RANKING_METER))
def test_the_ranking_mechanisms_pass_the_meter(name):
    assert _problems(name) == []


@pytest.mark.parametrize("mutant", RANKING_MUTANTS, ids=lambda m: f"{m.mechanism}: {m.what}")
def test_every_ranking_mutant_is_killed(mutant):
    with mutated(mutant): found = _problems(mutant.mechanism)
    assert found, f"mutant survived: {mutant.what} ({mutant.where})"
    assert _problems(mutant.mechanism) == []       # undone after its block


def test_each_mechanism_has_noise_clip_and_accounting_mutants():
    for name in RANKING_METER:
        whats = " ".join(m.what for m in RANKING_MUTANTS if m.mechanism == name)
        assert "halved" in whats and "trimming" in whats and "seed" in whats and "sensitivity" in whats, name


def test_the_comparison_is_deterministic_in_its_seeds():
    r = synthetic(n_users=300, n_items=80, n_ratings=6000, seed=1)
    a = ranking_record(compare_ranking(r, epsilons=(5.0,), seeds=(0,), n_heldout=30, progress=False))
    b = ranking_record(compare_ranking(r, epsilons=(5.0,), seeds=(0,), n_heldout=30, progress=False))
    strip = lambda rec: [{k: v for k, v in row.items() if k != "seconds"} for row in rec["rows"]]
    assert strip(a) == strip(b) and {row["kind"] for row in a["rows"]} == {"floor", "mechanism", "reference"}


def test_new_users_are_not_trained_on():
    s = new_user_split(binarize(synthetic(n_users=200, n_items=50, n_ratings=4000, seed=2)), n_heldout=20, seed=0)
    held = set(s.test_history.user) | set(s.validation_history.user)
    assert not held & set(s.train.user)


def _ml20m_fixture(root, n_users=240, n_items=60, seed=0):
    "MovieLens 20M's published files (ratings.csv, movies.csv) for a few users, under root/ml-20m/ml-20m/."
    g = np.random.default_rng(seed)
    d = root / "ml-20m" / "ml-20m"; d.mkdir(parents=True)
    lines = ["userId,movieId,rating,timestamp"]
    for u in range(1, n_users + 1):
        for m in sorted(g.choice(np.arange(1, n_items + 1), g.integers(20, 40), replace=False, p=None)):
            lines.append(f"{u},{m},{g.choice([2.5, 3.0, 3.5, 4.0, 4.5, 5.0])},{1100000000 + u}")
    (d / "ratings.csv").write_text("\n".join(lines) + "\n")
    genres = ["Action", "Comedy", "Drama", "Romance"]
    (d / "movies.csv").write_text("movieId,title,genres\n" + "".join(f'{m},"Film {m} ({1980 + m % 30})",{genres[m % 4]}|{genres[(m + 1) % 4]}\n'
                                                                     for m in range(1, n_items + 1)))
    return len(lines) - 1


def test_ml20m_published_protocol_by_one_command(tmp_path):
    "`dpmf compare --task ranking --dataset ml-20m` on files in the published format: Liang et al.'s protocol, a record written."
    n = _ml20m_fixture(tmp_path / "data")
    env = {**os.environ, "DPMF_DATA_DIR": str(tmp_path / "data"), "DPMF_ML_20M_N_RATINGS": str(n), "TQDM_DISABLE": "1"}
    p = subprocess.run([sys.executable, "-m", "dpmf_lit.cli.main", "compare", "--task", "ranking", "--dataset", "ml-20m", "--heldout", "20",
                        "--epsilons", "5", "--seeds", "1", "--out", str(tmp_path / "out"), "--json"],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    assert "MovieLens 20M as published" in p.stderr
    rec = json.loads(p.stdout)
    assert rec["candidates"] == "train" and rec["test_users"] <= 20 and rec["floor"] == "features only (on the device)"
    assert rec["condition"].startswith("Conditional guarantee") and "not charged" in rec["condition"]
    assert {r["label"] for r in rec["rows"]} >= {"popularity (noisy counts)", "dpals-implicit"}
    assert (tmp_path / "out" / "compare_ranking.png").exists()


def test_ml20m_missing_files_say_so_in_one_line(tmp_path):
    env = {**os.environ, "DPMF_DATA_DIR": str(tmp_path / "data")}
    p = subprocess.run([sys.executable, "-m", "dpmf_lit.cli.main", "compare", "--task", "ranking", "--dataset", "ml-20m"],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert p.returncode == 2 and p.stderr.count("dpmf: error:") == 1 and "ml-20m.zip" in p.stderr, p.stderr


def test_ranking_only_flags_are_refused_for_rmse():
    p = subprocess.run([sys.executable, "-m", "dpmf_lit.cli.main", "compare", "--heldout", "5"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "--heldout applies to --task ranking" in p.stderr, p.stderr


def test_the_readme_ranking_block_is_current():
    "The ranking block of nbs/index.ipynb (and so of README.md) is what `make readme` writes from the committed records, the stand-in's wall time and memory aside (every run of the batch measures them anew)."
    import re
    from pathlib import Path
    from dpmf_lit.records.results import load_record
    from dpmf_lit.studies.ranking import RANKING_HEADING, ranking_index_block
    nb = json.loads((Path(__file__).resolve().parents[1] / "nbs" / "index.ipynb").read_text(encoding="utf-8"))
    cell = next("".join(c["source"]) for c in nb["cells"] if "".join(c["source"]).startswith(RANKING_HEADING))
    untimed = lambda t: re.sub(r"\d+ min and [\d.]+ GiB", "(time) min and (memory) GiB", t)
    want = ranking_index_block(load_record("compare-ranking")["numbers"], load_record("compare-ranking-ml20m-shape")["numbers"])
    assert "min and" in want and untimed(cell) == untimed(want), "run 'make readme'"