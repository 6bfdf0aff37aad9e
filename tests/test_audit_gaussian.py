"""The audit of the Gaussian releases (nbs/12_audit §5.1–5.2): the one-run canary audit must catch dp-bias with half its noise
and stay below the claim on the honest mechanism; the ceiling and the Gaussian-DP bound are those of the ideal test."""
import math
import numpy as np
from dpmf_lit.studies.audit import (AUDITS, audit_table, canary_audit, canary_ceiling, ceiling_runs, gdp_bound, gdp_mu, guess_count,
                            one_run_epsilon, runs_for)
from dpmf_lit.model.mechanism import get_mechanism


def test_one_run_canary_audit_catches_half_the_noise_of_dp_bias():
    "200,000 canaries, one fit each side of the control: the honest bound stays at or below ε = 1, noise/2 is caught."
    mech = get_mechanism("dp-bias")(epsilon=1.0, max_ratings=1)
    honest, controls, k, ceiling = canary_audit(mech, 200_000, 1.0, 1e-5, factors=(2,))
    assert honest.epsilon <= 1.0, honest
    assert controls[2].epsilon > 1.0, controls      # fails when a 2× noise control is not caught
    assert 0.4 < honest.epsilon <= ceiling < 1.0


def test_the_one_run_bound_is_valid_on_ideal_scores():
    "Ideal μ-GDP scores: ε̂ ≤ the ε of μ over seeds, and the 2× scores are caught."
    mu, m = gdp_mu(1.0, 1e-5), 200_000
    _, k = canary_ceiling(mu, m, 1e-5)
    for seed in range(3):
        g = np.random.default_rng(seed); S = g.integers(0, 2, m).astype(bool)
        for f, ok in ((1, lambda e: e <= 1.0), (2, lambda e: e > 1.0)):
            v = guess_count(np.where(S, f * mu / 2, -f * mu / 2) + g.standard_normal(m), S, k)
            assert ok(one_run_epsilon(m, k, v, 1e-5)), (seed, f)


def test_ceiling_and_gdp_bound():
    mu = gdp_mu(1.0, 1e-5)
    assert abs(ceiling_runs(mu, 8000, 1e-5) - 0.32) < 0.02 and abs(ceiling_runs(2 * mu, 8000, 1e-5) - 0.90) < 0.03
    assert math.isinf(runs_for(0.01, 1.0, 1e-5, most=1e6))
    g = np.random.default_rng(0); n = 50_000
    a, b = g.normal(0.5, 1, n), g.normal(0, 1, n)
    assert 0.3 < gdp_bound(((a > 1).sum(), n, (b > 1).sum(), n)) <= 0.5


def test_gaussian_settings_and_table():
    for name in ("dp-bias", "dpals", "dp-bias-features"):
        s = AUDITS[name]
        assert s.statistic == "direction" and s.canaries >= 100_000 and s.canary_params.get("max_ratings") == 1
    assert AUDITS["sgld"].note and AUDITS["xin"].note and AUDITS["hua"].canaries == 0 and AUDITS["hua"].statistic == ""
    old = {"x": {"unit": "user", "pair": "user", "claim": "guarantee", "claimed": 1.0, "honest": {"epsilon": 0.1, "statistic": "LDA"},
                 "controls": {"2": {"epsilon": 0.5}}, "verdict": "inconclusive: …", "runs": 10, "caught_at": None}}
    assert audit_table(old).loc["x", "ceiling ε̂"] is None      # a record from before the ceiling still renders
