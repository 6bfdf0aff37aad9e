"""The comparison at equal privacy (nbs/11_compare.ipynb): the split, tuning on validation only, the record, the
table and the answer read from the same rows, README's first section generated from the committed record, and
`dpmf compare` end to end on the smoke profile."""
import json, math, re, subprocess, sys

import numpy as np
import pytest

from dpmf_lit.compare import (CONTENDERS, INDEX_HEADING, RELEASE_NOTHING, Contender, _grid, answer, compare_epsilons, comparison_record,
                              comparison_table, index_block, margin_interval, run_contender, three_way_split)
from dpmf_lit.data import synthetic
from dpmf_lit.mf import evaluate


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
    nothing = rec["floor"]["test_rmse"]
    assert rec["floor"]["label"] == min(rec["floor"]["valid_rmse"], key=rec["floor"]["valid_rmse"].get)   # chosen on validation
    for unit, wins in rec["beats_nothing_from"].items():
        for label, eps in wins.items():
            rows = rec["by_unit"][unit][label]
            assert eps == (min((e for e, v in zip(rows["epsilons"], rows["test_rmse"]) if v < nothing), default=None))
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


def test_readme_first_section_is_generated_from_the_committed_record():
    from dpmf_lit.results import load_record
    from dpmf_lit.settings import load_settings
    nb = json.loads((load_settings().root / "nbs" / "index.ipynb").read_text(encoding="utf-8"))
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]
    first_table = next(k for k, s in enumerate(cells) if "\n|" in s)
    assert cells[first_table].startswith(INDEX_HEADING), "README's first table must be the comparison"
    untimed = lambda t: re.sub(r"\(\d[\d.e+-]* s\)", "(s)", t)   # fit times are measured anew by every run of the batch
    assert untimed(cells[first_table]) == untimed(index_block(load_record("compare")["numbers"])), "run `make readme` after `dpmf compare`"


def test_a_bad_unit_is_refused_by_the_command_line():
    p = subprocess.run([sys.executable, "-m", "dpmf_lit.cli", "compare", "--unit", "household"], capture_output=True, text=True)
    assert p.returncode == 2 and "dpmf: error:" in p.stderr and "household" in p.stderr


@pytest.mark.slow
def test_dpmf_compare_smoke_regenerates_both_figures_and_prints_json(tmp_path):
    cmd = [sys.executable, "-m", "dpmf_lit.cli", "compare", "--profile", "smoke", "--figures-dir", str(tmp_path / "f"),
           "--build-dir", str(tmp_path / "b"), "--allow-dirty", "--no-progress", "--json", "--unit", "user"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert set(out) >= {"user", "baselines", "beats_nothing_from"} and "rating" not in out
    assert math.isclose(out["user"]["dp-bias"]["epsilons"][0], 1.0)
    for name in ("compare_epsilon", "compare_users"):
        assert (tmp_path / "f" / "compare" / f"{name}.png").is_file()
