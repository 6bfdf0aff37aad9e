"""The sgld-* experiment entries: their paper profile (ML-20M as the stand-in for Netflix) runs end to end through
`reproduce` on a fixture file in the published ML-20M format, with the loops shortened; the numbers they record obey
what the notebooks claim (personal loss within the guarantee, one RMSE per grid point, the trimmed share per tau)."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("papermill")
# four experiment notebooks end to end in the module fixture (25-45 s on 2 cores): the slow lane, with the fixture's limit
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[1]
EXP = ROOT / "nbs" / "experiments"
IDS = ("sgld-epochs", "sgld-table", "sgld-rmse-eps", "sgld-personal")
SHORT = {"epochs": 3, "burn_in": 1, "n_seeds": 2, "pmf_epochs": 3, "table_sizes": [256, 4096], "epsilons": [10.0, 1000.0]}


def _ml20m_fixture(data: Path, n_users=150, n_items=80, n=4000, seed=0):
    "ratings.csv as ML-20M publishes it: a header, then userId,movieId,rating (half stars),timestamp."
    rng = np.random.default_rng(seed)
    flat = rng.choice(n_users * n_items, n, replace=False)
    u, i, r = flat // n_items + 1, flat % n_items + 1, rng.integers(1, 11, n) / 2
    (data / "ml-20m" / "ml-20m").mkdir(parents=True)
    (data / "ml-20m" / "ml-20m" / "ratings.csv").write_text(
        "userId,movieId,rating,timestamp\n" + "".join(f"{a},{b},{c:.1f},1112486027\n" for a, b, c in zip(u, i, r)))
    return n


@pytest.fixture(scope="module")
def paper_run(tmp_path_factory):
    from dpmf_lit.records.provenance import load_results
    from dpmf_lit.batch.reproduce import reproduce
    from dpmf_lit.core.settings import load_settings
    tmp = tmp_path_factory.mktemp("sgld_paper")
    data = tmp / "data"
    n = _ml20m_fixture(data)
    doc = json.loads((EXP / "manifest.json").read_text())
    entries = [e for e in doc["entries"] if e["id"] in IDS]
    assert [e["id"] for e in entries] == list(IDS)
    exp = tmp / "exp"; exp.mkdir()
    for e in entries:
        assert set(e["profiles"]) == {"smoke", "quick", "paper"} and e["profiles"]["quick"]["dataset"] == "ml-100k"
        assert e["profiles"]["paper"]["dataset"] == "ml-20m"
        p = e["profiles"]["paper"]["parameters"]
        p.update({k: v for k, v in SHORT.items() if k in p})
        e["profiles"] = {"paper": e["profiles"]["paper"]}
        shutil.copy(EXP / e["notebook"], exp)
    (exp / "manifest.json").write_text(json.dumps({"description": "fixture run", "entries": entries}))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DPMF_DATA_DIR", str(data)); mp.setenv("DPMF_ML_20M_N_RATINGS", str(n))
        s = load_settings(figures_dir=tmp / "figures", build_dir=tmp / "build", results_file=tmp / "figures" / "results.json",
                          manifest=exp / "manifest.json", data_dir=data)
        summary = reproduce(profile="paper", settings=s, progress=False, jobs=1)
    return s, summary, load_results(s.results_file)


def test_paper_profile_runs_on_an_ml20m_fixture(paper_run):
    s, summary, res = paper_run
    assert summary.exit_code == 0, str(summary)
    assert set(res) == set(IDS)
    for eid in IDS:
        assert res[eid]["numbers"]["dataset"].startswith("ml-20m")
        name = eid.replace("-", "_")
        assert (s.figures_dir / "sgld" / f"{name}.png").is_file() and (s.figures_dir / "sgld" / f"{name}.svg").is_file()


def test_recorded_numbers_obey_the_notebooks_claims(paper_run):
    _, _, res = paper_run
    ep = res["sgld-epochs"]["numbers"]
    assert all(len(v) == SHORT["epochs"] for v in ep["sgld_sample_rmse"].values())
    assert all(v[0] is None and v[-1] is not None for v in ep["sgld_mean_rmse"].values())   # the mean starts after burn-in
    tb = res["sgld-table"]["numbers"]
    assert len(tb["runs"]) == (len(SHORT["table_sizes"]) + 1) * SHORT["n_seeds"] and "fresh" in tb["mean"]["sample_rmse"]
    re = res["sgld-rmse-eps"]["numbers"]
    assert set(re["rmse_mean"]) == {"50", "100", "200"} and all(len(v) == len(SHORT["epsilons"]) for v in re["rmse_mean"].values())
    shares = [re["trimmed_share"][t] for t in ("50", "100", "200")]
    assert 0 <= shares[2] <= shares[1] <= shares[0] < 1                    # a larger tau trims less
    pe = res["sgld-personal"]["numbers"]
    for lv, g in pe["groups"].items():
        assert g["guarantee"] == pytest.approx(float(lv) * pe["epsilon"])
        assert 0 <= g["median"] <= g["max"] <= g["guarantee"] + 1e-9       # the data-dependent loss never exceeds w_i * eps
    assert 0 <= pe["overall_median_ratio"] <= pe["overall_max_ratio"] <= 1
