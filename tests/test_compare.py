"""The comparison at equal privacy (nbs/11_compare.ipynb): the split, tuning on validation only, the record, the
table and the answer read from the same rows, README's first section generated from the committed record, and
`dpmf compare` end to end on the smoke profile."""
import json, math, re, subprocess, sys
from pathlib import Path

import numpy as np
import pytest

from dpmf_lit.studies.compare import (CONTENDERS, INDEX_HEADING, RELEASE_NOTHING, Contender, _grid, answer, compare_epsilons, comparison_record,
                              comparison_table, index_block, margin_interval, public_standin, run_contender, three_way_split, margin_verdict)
from dpmf_lit.data import synthetic
from dpmf_lit.model.mf import evaluate


@pytest.fixture(scope="module")
def data():
    return synthetic(300, 120, 9000, seed=2)


def test_the_split_is_80_10_10_disjoint_and_seeded(data):
    tr, va, te = three_way_split(data, 3)
    assert (len(tr), len(va), len(te)) == (7200, 900, 900)
    keys = [set(zip(r.user.tolist(), r.item.tolist())) for r in (tr, va, te)]
    assert not (keys[0] & keys[1] or keys[0] & keys[2] or keys[1] & keys[2])
    again = three_way_split(data, 3)
    assert all(np.array_equal(a.rating, b.rating) for a, b in zip((tr, va, te), again))


def test_tuning_looks_at_validation_not_test(data):
    tr, va, te = three_way_split(data, 0)
    c = Contender("um", "user-mean", "none", {}, _grid(reg=(0.0, 2.0, 1e6)))
    row = run_contender(c, None, tr, va, te, seeds=(0,))
    by_valid = min(c.grid, key=lambda p: evaluate(c.build(None, 0, **p).fit(tr), va)["rmse"])
    assert row["params"] == by_valid and row["valid_rmse"] is not None


def test_record_table_and_answer_read_the_same_rows(data):
    df = compare_epsilons(data, (0.5, 5.0), (0, 1), contenders=tuple(c for c in CONTENDERS if c.label in ("dp-bias", "hua")), progress=False)
    rec = comparison_record(df)
    r = rec["by_unit"]["user"]["dp-bias"]
    assert r["coverage"] == "end-to-end" and r["epsilons"] == [0.5, 5.0]
    assert "hua" in rec["by_unit"]["rating"] and "hua" not in rec["by_unit"]["user"]
    table = comparison_table(rec, "rating", (0.5, 5.0))
    assert f"{r['test_rmse'][1]:.3f} ± {r['test_sd'][1]:.3f}" in table and "user-mean (releases nothing)" in table
    assert rec["floor"]["label"] == min(rec["floor"]["valid_rmse"], key=rec["floor"]["valid_rmse"].get)   # chosen on validation
    for unit, wins in rec["beats_nothing_from"].items():
        for label, eps in wins.items():                                  # beaten only where the interval lies above zero
            rows = rec["by_unit"][unit][label]
            assert eps == (min((e for e, lo in zip(rows["epsilons"], rows["margin_lo"]) if lo > 0), default=None))
    assert "releasing nothing" in answer(rec, (0.5, 5.0))


def test_margin_interval_is_paired_and_catches_a_real_difference():
    rng = np.random.default_rng(0)
    user = rng.integers(0, 200, 4000)
    floor = rng.exponential(1.0, 4000)
    m, lo, hi = margin_interval([floor, floor], floor, user, 200)
    assert max(abs(m), abs(lo), abs(hi)) < 1e-12                  # the same errors: no margin, and no width (paired)
    better = [floor * 0.95, floor * 0.96]                         # 4-5 % lower squared error for every user
    m, lo, hi = margin_interval(better, floor, user, 200)
    assert 0 < lo < m < hi
    noisy = [floor * rng.uniform(0.5, 1.5, 4000) for _ in range(3)]   # no systematic difference
    m, lo, hi = margin_interval(noisy, floor, user, 200)
    assert lo < 0 < hi


def test_the_floor_is_the_release_nothing_baseline_best_on_validation(data):
    df = compare_epsilons(data, (1.0,), (0, 1), contenders=tuple(c for c in CONTENDERS if c.label == "dp-bias + features"), progress=False)
    rec = comparison_record(df)
    valid = rec["floor"]["valid_rmse"]
    assert set(valid) == set(RELEASE_NOTHING) and rec["floor"]["label"] == min(valid, key=valid.get)
    assert rec["floor"]["test_rmse"] == rec["baselines"][rec["floor"]["label"]]
    r = rec["by_unit"]["user"]["dp-bias + features"]
    assert math.isclose(r["margin"][0], rec["floor"]["test_rmse"] - r["test_rmse"][0], abs_tol=2e-4)
    assert r["margin_lo"][0] <= r["margin"][0] <= r["margin_hi"][0]
    assert "the floor, best on validation" in comparison_table(rec, "user", (1.0,))



def test_rows_that_need_item_features_are_left_out_of_ratings_without_them(data):
    "No feature to regress on: those rows (and the floor's user-features) are left out before any fit, and the record says why."
    pick = tuple(c for c in CONTENDERS if c.label in ("dp-bias", "dp-bias + features"))
    df = compare_epsilons(data.with_features(None), (1.0,), (0,), contenders=pick, progress=False, public_tuning=False)
    rec = comparison_record(df)
    assert "dp-bias" in rec["by_unit"]["user"] and "dp-bias + features" not in rec["by_unit"]["user"]
    assert {"dp-bias + features", "user-features"} <= set(rec["left_out"]["labels"]) and "have none" in rec["left_out"]["why"]
    assert "user-features" not in rec["baselines"] and rec["floor"]["label"] == "user-mean"
    assert f"Left out on this data: {'; '.join(rec['left_out']['labels'])}" in answer(rec, (1.0,))
    assert not df.error.notna().any()                                  # left out, not failed

def test_readme_first_section_is_generated_from_the_committed_record():
    from dpmf_lit.records.results import load_record
    from dpmf_lit.core.settings import load_settings
    nb = json.loads((load_settings().root / "nbs" / "index.ipynb").read_text(encoding="utf-8"))
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]
    first_table = next(k for k, s in enumerate(cells) if "\n|" in s)
    assert cells[first_table].startswith(INDEX_HEADING), "README's first table must be the comparison"
    untimed = lambda t: re.sub(r"\(\d[\d.e+-]* s\)", "(s)", t)   # fit times are measured anew by every run of the batch
    assert untimed(cells[first_table]) == untimed(index_block(load_record("compare")["numbers"])), "run `make readme` after `dpmf compare`"


@pytest.mark.parametrize("args, named", [
    (["--format", "movielens-dat"], "--format"), (["--profile", "smoke", "--force"], "--force"),
    (["--epsilons", "1,-2"], "--epsilons"), (["--seeds", "0"], "--seeds"), (["--dataset", " "], "--dataset"),
    (["--dataset", "/no/such/ratings.dat"], "/no/such/ratings.dat"), (["--profile", "smoke", "--out", "/proc/x/y"], "--out")])
def test_bad_compare_arguments_are_refused_before_any_work(args, named):
    p = subprocess.run([sys.executable, "-m", "dpmf_lit.cli.main", "compare", "--no-progress", *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "dpmf: error:" in p.stderr and named in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_bad_unit_is_refused_by_the_command_line():
    p = subprocess.run([sys.executable, "-m", "dpmf_lit.cli.main", "compare", "--unit", "household"], capture_output=True, text=True)
    assert p.returncode == 2 and "dpmf: error:" in p.stderr and "household" in p.stderr


@pytest.mark.slow
def test_dpmf_compare_smoke_writes_its_own_record_and_figures_not_the_committed_ones(tmp_path):
    from dpmf_lit.core.settings import load_settings
    results = load_settings().results_file
    before, figs = results.read_bytes(), {p: p.read_bytes() for p in (results.parent / "compare").glob("*.png")}
    cmd = [sys.executable, "-m", "dpmf_lit.cli.main", "compare", "--profile", "smoke", "--build-dir", str(tmp_path / "b"),
           "--no-progress", "--json", "--unit", "user"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert set(out) >= {"user", "baselines", "beats_nothing_from"} and "rating" not in out
    assert math.isclose(out["user"]["dp-bias"]["epsilons"][0], 1.0) and out["splits"] == 2
    own = Path(out["folder"])
    assert own.parent == tmp_path / "b" / "compare" and own.name.startswith("smoke") and (own / "record.json").is_file()
    assert "no guarantee covers them" in out["not_covered"]
    for name in ("compare_epsilon", "compare_users", "compare_slices"): assert (own / f"{name}.png").is_file()
    assert results.read_bytes() == before and all(p.read_bytes() == b for p, b in figs.items())


def test_a_contender_that_fails_leaves_the_others_rows_intact(data):
    broken = Contender("dpals, forced to fail", "dpals", "user", {"d": 0})
    ok = tuple(c for c in CONTENDERS if c.label == "dp-bias")
    both = compare_epsilons(data, (1.0,), (0, 1), contenders=(broken,) + ok, progress=False, public_tuning=False).set_index("label")
    alone = compare_epsilons(data, (1.0,), (0, 1), contenders=ok, progress=False, public_tuning=False).set_index("label")
    assert "d" in both.loc["dpals, forced to fail"].error and math.isnan(both.loc["dpals, forced to fail"].test_rmse)
    assert both.loc["dp-bias"].test_rmse == alone.loc["dp-bias"].test_rmse and both.loc["dp-bias"].margin == alone.loc["dp-bias"].margin
    rec = comparison_record(both.reset_index())
    assert "failed: ValueError" in comparison_table(rec, "user", (1.0,))
    assert "dpals, forced to fail" not in answer(rec, (1.0,)).split("Never")[0]   # a failed row is never the recommendation


def test_public_tuning_reads_no_private_rating(data):
    """The covered rows' choice is a function of public quantities only: two private data sets of the same shape (users,
    items, scale) give the same stand-in and so the same chosen grid point, whatever their ratings."""
    other = data.take(np.random.default_rng(1).permutation(len(data))[: len(data) // 3])
    assert np.array_equal(public_standin(data).rating, public_standin(other).rating)
    c = next(c for c in CONTENDERS if c.label == "dp-bias")
    tune_on = three_way_split(public_standin(data), 0)[:2]
    picks = [run_contender(c, 1.0, *three_way_split(d, 0), seeds=(0,), tune_on=tune_on) for d in (data, other)]
    assert picks[0]["params"] == picks[1]["params"] and picks[0]["selection"] == "public"
    flipped = data.take(np.arange(len(data)))
    flipped = type(data)(flipped.user, flipped.item, (6 - flipped.rating).astype(np.float32), data.n_users, data.n_items, 1.0, 5.0)
    assert run_contender(c, 1.0, *three_way_split(flipped, 0), seeds=(0,), tune_on=tune_on)["params"] == picks[0]["params"]


def test_verdicts_read_the_interval_not_the_mean():
    assert margin_verdict(0.001, 0.02) == "beats" and margin_verdict(-0.02, -0.001) == "loses to"
    assert margin_verdict(-0.0004, 0.0011) == "indistinguishable from" and margin_verdict(None, None) == "failed"


def test_margin_interval_over_splits_widens_with_the_splits_luck():
    rng = np.random.default_rng(3)
    users = [rng.integers(0, 100, 3000) for _ in range(3)]
    floor = [rng.exponential(1.0, 3000) for _ in range(3)]
    same = [[f * 0.97, f * 0.97] for f in floor]                        # the same 3 % better on every split
    luck = [[f * k, f * k] for f, k in zip(floor, (0.90, 0.97, 1.04))]   # better on one split, worse on another
    m1, lo1, hi1 = margin_interval(same, floor, users, 100)
    m2, lo2, hi2 = margin_interval(luck, floor, users, 100)
    assert lo1 > 0 and hi2 - lo2 > 2 * (hi1 - lo1) and lo2 < 0 < hi2
    one = margin_interval(same[0], floor[0], users[0], 100)             # one split: the former, users-and-seeds interval
    assert one[1] < one[0] < one[2]


def test_the_committed_record_is_shown_not_recomputed_in_a_fresh_build_folder(tmp_path):
    """A fresh clone has no build folder: `dpmf compare` shows the current committed record (no batch run) and leaves results.json as it was."""
    from dpmf_lit.core.settings import load_settings
    results = load_settings().results_file
    before = results.read_bytes()
    p = subprocess.run([sys.executable, "-m", "dpmf_lit.cli.main", "compare", "--build-dir", str(tmp_path / "b"), "--unit", "user", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "shown, not recomputed" in p.stderr and not (tmp_path / "b" / "quick").exists()
    assert results.read_bytes() == before and "dp-bias" in json.loads(p.stdout)["user"]


@pytest.mark.slow
def test_dpmf_compare_on_a_movielens_file_it_never_saw_writes_apart(tmp_path):
    """`dpmf compare --dataset FILE` end to end on a MovieLens-format file made here (no item features): every contender's
    row, both kinds of tuning, the intervals over two splits; written under --out, the committed record untouched."""
    from dpmf_lit.core.settings import load_settings
    d = synthetic(250, 90, 7000, seed=11)
    lines = [f"{u + 1}::{i + 1}::{int(r)}::{978300000 + k}" for k, (u, i, r) in enumerate(zip(d.user, d.item, d.rating))]
    f = tmp_path / "ratings.dat"; f.write_text("\n".join(lines) + "\n")
    results = load_settings().results_file
    before = results.read_bytes()
    cmd = [sys.executable, "-m", "dpmf_lit.cli.main", "compare", "--dataset", str(f), "--epsilons", "1", "--seeds", "2", "--splits", "2",
           "--out", str(tmp_path / "out"), "--no-progress", "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout)
    rows = out["user"]
    assert rows["dp-bias"]["error"] == [None] and rows["dp-bias"]["test_rmse"][0] > 0
    failed = {label for u in ("user", "rating") for label, r in out[u].items() if r["selection"] is None}
    assert failed == set(), failed                 # none failed: a .dat file has no item features, so the rows needing them were left out
    left = set(out["left_out"]["labels"])
    assert left == {"dpals + CMF (Curmei et al.)", "dpals + local features, α tuned (ours)", "dp-bias + features",
                    "dpals-adaptive + local features, α tuned (ours)",
                    "dp-bias + features + prior (ours)", "user-features"}, left        # with their [public tuning] twins
    shown = {label.split(" [")[0] for u in ("user", "rating") for label in out[u]} | set(out["baselines"]) | set(out["no_guarantee"])
    assert out["left_out"]["why"] and not left & shown, out["left_out"]   # said, and not run
    assert {r["selection"] for u in ("user", "rating") for r in out[u].values()} - {None} == {"validation", "public", "none"}
    assert "dp-bias [public tuning]" in rows
    assert all(r["margin_lo"][0] <= r["margin"][0] <= r["margin_hi"][0] for r in rows.values() if not r["error"][0])
    assert out["floor"]["label"] in RELEASE_NOTHING and out["splits"] == 2
    assert str(tmp_path / "out") in out["written_to"] and (tmp_path / "out" / "record.json").is_file()
    for name in ("compare_epsilon", "compare_slices"): assert (tmp_path / "out" / f"{name}.png").is_file()
    assert results.read_bytes() == before


@pytest.mark.slow
def test_the_fits_run_on_a_dask_cluster_with_the_same_numbers(data):
    distributed = pytest.importorskip("distributed")
    one = tuple(c for c in CONTENDERS if c.label == "dp-bias")
    here = compare_epsilons(data, (1.0,), (0, 1), contenders=one, progress=False, splits=2)
    with distributed.Client(processes=False, n_workers=2, threads_per_worker=1, dashboard_address=None) as client:
        there = compare_epsilons(data, (1.0,), (0, 1), contenders=one, progress=False, splits=2, dask=client)
    cols = ["label", "test_rmse", "valid_rmse", "margin", "margin_lo", "margin_hi"]
    assert here[cols].equals(there[cols])


def test_public_tuning_reads_nothing_private_on_neighbours_built_through_the_loader():
    "MovieLens files read by load_dataset (an item losing its only rater; a user's count, rows and the data's top rating changing): the stand-in and the data every [public tuning] row is chosen on are the same on both sides."
    from dpmf_lit.studies.meter_public import read_standin
    assert read_standin().problems == []
