"""The paper profile of the pdp-* entries on small fixture files in the published ML-1M and Netflix formats: each
notebook runs end to end with the paper profile's settings (folds and k2 lists shortened) and writes its figure."""
import json
from pathlib import Path

import numpy as np
import pytest

papermill = pytest.importorskip("papermill")
pytestmark = pytest.mark.slow   # each test runs an experiment notebook end to end
ROOT = Path(__file__).resolve().parents[1]
ENTRIES = {e["id"]: e for e in json.loads((ROOT / "nbs/experiments/manifest.json").read_text())["entries"] if e["paper"] == "pdp"}


def _fixtures(data_dir: Path, n_users=120, n_items=60, n=2400, seed=0):
    rng = np.random.default_rng(seed)
    flat = rng.choice(n_users * n_items, n, replace=False)
    u, i, r = flat // n_items + 1, flat % n_items + 1, rng.integers(1, 6, n)
    (data_dir / "ml-1m" / "ml-1m").mkdir(parents=True); (data_dir / "netflix").mkdir()
    (data_dir / "ml-1m" / "ml-1m" / "ratings.dat").write_text("".join(f"{a}::{b}::{c}::978300760\n" for a, b, c in zip(u, i, r)))
    for k in range(4):   # Netflix's combined_data files: 'MovieID:' then 'CustomerID,Rating,Date'
        sel = (i % 4) == k
        lines = []
        for m in np.unique(i[sel]):
            lines.append(f"{m}:\n" + "".join(f"{a},{c},2005-09-06\n" for a, c in zip(u[sel & (i == m)], r[sel & (i == m)])))
        (data_dir / "netflix" / f"combined_data_{k + 1}.txt").write_text("".join(lines))


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("dataset", ["ml-1m", "netflix"])
def test_paper_profile_runs_on_fixtures(entry, dataset, tmp_path, monkeypatch):
    data = tmp_path / "data"; _fixtures(data)
    monkeypatch.setenv("DPMF_DATA_DIR", str(data))
    for name in ("ML_1M", "NETFLIX"): monkeypatch.setenv(f"DPMF_{name}_N_RATINGS", "2400")   # the fixtures' size
    e = ENTRIES[entry]
    params = {**e["profiles"]["paper"]["parameters"], "dataset": dataset, "out_dir": str(tmp_path / "out"), "data_dir": str(data),
              "folds": 2, "k1": 5, "d": 5, "netflix_users": 100}
    for key, short in (("f_cs", [0.1, 0.5]), ("eps_ms", [0.2, 0.6]), ("k2s", [1, 3]), ("ts", [0.445, 1.0]), ("ts_cdf", [0.6, 1.0])):
        if key in params or key in ("ts", "ts_cdf") and entry == "pdp-threshold": params[key] = short
    papermill.execute_notebook(str(ROOT / "nbs/experiments" / e["notebook"]), str(tmp_path / "run.ipynb"), parameters=params,
                               progress_bar=False, cwd=str(ROOT))
    assert (tmp_path / "out" / f"{e['outputs'][0]}.png").is_file()
    numbers = json.loads((tmp_path / "out" / "numbers.json").read_text())
    assert numbers["dataset"].startswith(dataset)
