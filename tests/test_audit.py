"""The empirical privacy audit (nbs/12_audit): the bound, the pairs, the controls, a fast audit of every mechanism, the CLI."""
import json, math, subprocess, sys
import numpy as np
import pytest
from dpmf_lit.studies.audit import (AUDITS, BATCH, PAIRS, audit, audit_status, audited_clause, control, epsilon_bound, neighbouring_pair,
                            PAPER_AUDITS, sync_papers_table)
from dpmf_lit.model.mechanism import get_mechanism, mechanisms
from dpmf_lit.records.results import load_record


def test_the_bound_holds_for_a_laplace_mechanism_and_catches_too_little_noise():
    "Laplace at ε = 1 (5,000 runs a side): the honest bound stays below 1 and reaches most of it; half the noise is caught."
    g, n = np.random.default_rng(3), 5000
    lap = lambda s, b: (s + g.laplace(0, b, n))[:, None]
    none = np.zeros(n, bool)
    honest = epsilon_bound(lap(0, 1), lap(1, 1), none, none)
    assert 0.7 < honest.epsilon <= 1.0
    assert epsilon_bound(lap(0, 0.5), lap(1, 0.5), none, none).epsilon > 1.0


def test_an_error_is_an_output():
    "Fits that raise on one data set only are an event the audit sees."
    n = 1000
    X = np.zeros((n, 1)); e1 = np.zeros(n, bool); e2 = np.arange(n) % 3 == 0
    b = epsilon_bound(X, X, e1, e2)
    assert b.statistic == "error" and b.epsilon > 0.5


@pytest.mark.parametrize("pair", sorted(set(PAIRS.values())))
def test_pairs_differ_in_one_unit(pair):
    D, D2 = neighbouring_pair(pair)
    if pair == "value": assert (D.rating != D2.rating).sum() == 1
    elif pair == "absent": assert len(D) - len(D2) == 1
    elif pair == "user": assert set(D.user[D.rating != D2.rating]) == {0}
    else: assert (D2.user == 0).sum() == 0 and len(D) > len(D2)


GUARANTEED = [n for n in mechanisms() if audit_status(n).startswith("audited")]


def test_every_mechanism_with_a_guarantee_has_an_audit_setting():
    assert set(GUARANTEED) <= set(AUDITS), set(GUARANTEED) - set(AUDITS)
    assert {"hua", "dp-bias", "dpals", "sgld", "gauss", "dp-pmf", "pdp-pmf", "xin", "hua-protocol"} <= set(GUARANTEED)


@pytest.mark.parametrize("name", sorted(mechanisms()))
def test_fast_audit(name):
    """A fast audit of each mechanism (small runs): it must not find the honest run above its claim while its half-noise
    control is caught — a caught control proves the audit had the power to see a violation there. Without a guarantee: says why."""
    if name not in GUARANTEED:
        with pytest.raises(ValueError, match="nothing to audit|no differential-privacy guarantee"): audit(name, runs=20)
        return
    if name == "gauss": pytest.skip("the paper variant has no guarantee and is refuted by design (test_gauss_paper_claim_is_refuted)")
    runs = 150 if name == "hua-protocol" else 400
    r = audit(name, runs=runs, factors=(2,))
    assert r.controls and r.verdict
    caught = r.controls[2].epsilon > r.claimed
    assert not (caught and r.honest.epsilon > r.claimed), r.summary()


def test_gauss_paper_claim_is_refuted_and_the_repair_is_consistent():
    "The paper variant at J = 2, μ = 1: ε̂ far above 0.144; the repaired variant stays below its ε and its σ/4 control is caught."
    paper = audit("gauss", runs=400)
    assert paper.claim.startswith("paper's claim") and paper.honest.epsilon > 5 * paper.claimed
    assert paper.verdict.startswith("VIOLATED")
    both = audit("gauss", runs=1000, params=dict(variant="both", step_epsilon=0.9, epochs=1))
    assert both.honest.epsilon <= both.claimed and both.caught_at in (2, 4), both.summary()
    assert both.claim == "conditional guarantee" and "does not raise" in both.condition and "assumes" in both.verdict


def test_a_pair_the_guarantee_does_not_cover_is_refused():
    "hua's guarantee is per rating value (replace): removing a rating is another neighbour, which it does not cover."
    with pytest.raises(ValueError, match="pair='absent' is not covered by hua's guarantee"): audit("hua", runs=20, pair="absent")


def test_per_rating_streams_are_fixed_only_where_every_rating_stays(monkeypatch):
    "dp-bias fixes its sampling stream on the value pair, not on the absent one (a removed rating would shift the others' draws)."
    import dpmf_lit.studies.audit as A
    seen = []
    real = A.run_releases
    def spy(*a, fixed=(), **k): seen.append(tuple(fixed)); return real(*a, fixed=fixed, **k)
    monkeypatch.setattr(A, "run_releases", spy)
    name = "dp-bias"; setting = AUDITS[name]
    assert setting.fixed_rows
    audit(name, runs=20, factors=(2,))
    assert all(set(setting.fixed_rows) <= set(f) for f in seen)
    declared = audit(name, runs=20, factors=(2,)).pair
    if "absent" in A.COVERS[declared]:
        seen.clear(); audit(name, runs=20, factors=(2,), pair="absent")
        assert all(not set(setting.fixed_rows) & set(f) for f in seen)


def test_control_scales_the_noise():
    m = get_mechanism("gauss")(d=1)
    c = control(m, "rating_range", 4)
    D, _ = neighbouring_pair("value", 1, 1)
    assert c.tau_for(D) == m.tau_for(D) / 4 and m.tau_for(D) == 4.0
    with pytest.raises(ValueError, match="control='x'"): control(m, "x", 2)


def test_record_and_papers_table_agree(tmp_path):
    "The committed audit record covers BATCH, and the papers table carries each paper's audited clause from it."
    rec = load_record("audit")["numbers"]["audits"]
    assert set(rec) == {label for label, _, _ in BATCH}
    for r in rec.values():
        assert r["controls"] and (r["verdict"].startswith("inconclusive") == (r["caught_at"] is None) or r["verdict"].startswith("VIOLATED"))
    from pathlib import Path
    index = Path(__file__).parents[1] / "nbs" / "index.ipynb"
    text = index.read_text(encoding="utf-8")
    for key in PAPER_AUDITS:
        assert audited_clause(rec, key) in "".join(
            "".join(c["source"]) for c in json.loads(text)["cells"]), key
    copy = tmp_path / "index.ipynb"; copy.write_text(text, encoding="utf-8")
    assert not sync_papers_table(copy)


def test_cli_audit(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "dpmf_lit.cli.main", "audit", *a], capture_output=True, text=True)
    ok = run("dp-pmf", "--runs", "200", "--no-progress", "--json")
    assert ok.returncode == 0, ok.stderr
    rec = json.loads(ok.stdout)
    assert rec["mechanism"] == "dp-pmf" and rec["pair"] == "value" and "2" in rec["controls"]
    bad = run("pmf")
    assert bad.returncode == 2 and bad.stderr.startswith("dpmf: error: pmf has no differential-privacy guarantee")
    bad = run("hua", "--pair", "nope")
    assert bad.returncode == 2
    bad = run("hua", "--set", "d=0")
    assert bad.returncode == 2 and "dpmf: error: d=0" in bad.stderr


@pytest.mark.parametrize("name", ["hua", "dp-bias", "dp-pmf", "dpals", "xin"])
def test_a_claim_no_audit_can_test_is_refused_by_name_without_warnings(name):
    "epsilon=1e300: e^ε leaves floating point; refused after the probe, naming epsilon, with no RuntimeWarning on the way."
    import warnings
    from dpmf_lit.studies.audit import audit
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"^epsilon=1e\+300: .* no audit can test a claim above ε = 100"):
            audit(name, runs=20, params={"epsilon": 1e300})


def test_the_epsilon_of_a_negligible_noise_is_refused_by_name():
    from dpmf_lit.core.privacy import gaussian_epsilon
    with pytest.raises(ValueError, match="the epsilon of noise multiplier 3e-151 at delta 1e-05 overflows"): gaussian_epsilon(3e-151, 1e-5)
