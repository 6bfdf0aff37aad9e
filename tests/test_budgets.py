"""Spending a user's budget (nbs/11d_compare_budgets) and MovieLens 10M as published: `dpmf compare --dataset ml-10m` on files in
MovieLens 10M's format runs every row of the comparison, DPALS's uniform and tail sampling, Google's ML-10M setting and the
adaptive rows among them, on random 80/10/10 splits."""
import json
import os
import subprocess
import sys
import numpy as np
import pytest
from dpmf_lit.data.synthetic import synthetic
from dpmf_lit.model.cards import Contender
from dpmf_lit.studies.budgets import BUDGET_ROWS, budgets_answer, budgets_record, compare_budgets, slice_margins


def _ml10m_fixture(root, n_users=300, n_items=80, seed=3):
    "MovieLens 10M's published files (ratings.dat: user::item::rating::time in half stars; movies.dat: item::title::genres) under root/ml-10m/ml-10M100K/."
    g = np.random.default_rng(seed)
    d = root / "ml-10m" / "ml-10M100K"; d.mkdir(parents=True)
    lines = []
    for u in range(1, n_users + 1):
        for m in sorted(g.choice(np.arange(1, n_items + 1), g.integers(20, 40), replace=False)):
            lines.append(f"{u}::{m}::{g.choice(np.arange(1, 11)) / 2:g}::{838985046 + len(lines)}")
    (d / "ratings.dat").write_text("\n".join(lines) + "\n")
    genres = ["Action", "Comedy", "Drama", "Romance", "Thriller"]
    (d / "movies.dat").write_text("".join(f"{m}::Film {m} ({1980 + m % 30})::{genres[m % 5]}|{genres[(m + 2) % 5]}\n" for m in range(1, n_items + 1)))
    return len(lines)


@pytest.mark.slow
def test_ml10m_published_protocol_by_one_command(tmp_path):
    n = _ml10m_fixture(tmp_path / "data")
    env = {**os.environ, "DPMF_DATA_DIR": str(tmp_path / "data"), "DPMF_ML_10M_N_RATINGS": str(n), "TQDM_DISABLE": "1"}
    p = subprocess.run([sys.executable, "-m", "dpmf_lit.cli.main", "compare", "--dataset", "ml-10m", "--epsilons", "1", "--seeds", "1",
                        "--splits", "1", "--out", str(tmp_path / "out"), "--no-progress", "--json"],
                       capture_output=True, text=True, timeout=1200, cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "MovieLens 10M as published (Lee et al. 2013): 1 random 80/10/10 split(s)" in p.stderr
    out = json.loads(p.stdout)
    rows = out["user"]
    want = {"dpals", "dpals, tail sampling", "dpals (d = 8, T = 2, τ = 100: Google's ML-10M setting at ε = 1)", "dpals-adaptive",
            "dpals-adaptive + local features, α tuned (ours)", "dpals + local features, α tuned (ours)"}
    assert want <= set(rows), want - set(rows)          # the genres of movies.dat are the public features: no row was left out
    assert all(rows[k]["error"] == [None] and rows[k]["test_rmse"][0] > 0 for k in want)
    assert (tmp_path / "out" / "compare_epsilon.png").exists()


def test_the_budget_rows_compared_with_a_tail_margin_each():
    r = synthetic(n_users=1200, n_items=150, n_ratings=30000, seed=2)
    rows = tuple(Contender(c.label, c.mechanism, c.unit, c.fixed, c.grid[:1]) for c in BUDGET_ROWS)
    df, margins = compare_budgets(r, epsilons=(3.0,), seeds=(0,), rows=rows, progress=False)
    rec = budgets_record(df, margins, r.name)
    assert [x["label"] for x in rec["rows"]] == [c.label for c in BUDGET_ROWS]
    for x in rec["rows"]:
        lo, m, hi = x["by_slice"]["tail"][1], x["by_slice"]["tail"][0], x["by_slice"]["tail"][2]
        assert lo <= m <= hi and x["reported_epsilon"] == pytest.approx(3.0, rel=1e-3)
    assert rec["floor"] in ("user-mean", "user-features") and "bias" in rec["rest"]
    # every slice of every row has its margin inside its own interval
    assert all(lo <= m <= hi for v in margins.values() for m, lo, hi in v.values())
    assert all(set(v) == {"head", "torso", "tail"} for v in margins.values())
    assert budgets_answer(rec, 3.0).startswith("At ε = 3 per user, beating the floor")
