"""The reviewer's table of the privacy-reports work, reproduced on the command line's split of MovieLens 100K
(80/20, seed 0; the mechanisms' seed 0, so the noise is public and the numbers are reproducible): the baselines
are in test_baselines.py; here the rows of PMF and the papers' mechanisms, and what their reports now say."""
import pytest

from dpmf_lit.cli.main import fit_report

# (mechanism, parameters, the reviewer's test RMSE, what the report must be)
ROWS = [("pmf", {}, 0.901, "non-private"),
        ("sgld", {"epsilon": 1.0}, 1.099, "conditional"), ("sgld", {"epsilon": 10.0}, 1.085, "conditional"),
        ("sgld", {"epsilon": 1000.0}, 0.969, "conditional"),
        ("dp-pmf", {"epsilon": 0.1}, 2.337, "conditional"), ("pdp-pmf", {}, 2.309, "conditional"),
        ("gauss", {"step_epsilon": 0.4, "epochs": 300}, 1.012, "none")]


@pytest.mark.parametrize("name,params,rmse,coverage", ROWS, ids=[f"{r[0]}-{r[1]}" for r in ROWS])
def test_the_reviewers_rows(name, params, rmse, coverage):
    rep = fit_report(name, "ml-100k", {**params, **({"seed": 0} if name != "pmf" else {})}, 0.2, 0)
    assert rep["rmse"] == pytest.approx(rmse, abs=0.005), rep["rmse"]
    p = rep["privacy"]
    assert (p["coverage"] if p["method"] != "non-private" else "non-private") == coverage
    if coverage == "none": assert p["epsilon"] is None and "-DP per" not in p["summary"]   # no headline
    if coverage == "conditional": assert p["summary"].startswith(p["condition"])
