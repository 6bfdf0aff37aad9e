"""Mechanism cards: each registered mechanism states its paper, guarantee, rows and audits once, beside its class, and
the studies' lists are generated from the cards. A mechanism with a guarantee that no study shows fails here."""
from pathlib import Path

from dpmf_lit.studies import audit, compare
from dpmf_lit.batch import outputs
from dpmf_lit.model.cards import ROLES, Card, cards
from dpmf_lit.model.mechanism import mechanisms

ROOT = Path(__file__).resolve().parents[1]


def test_every_mechanism_with_a_guarantee_is_compared_and_audited():
    "A registered mechanism whose class has an `epsilon` parameter is in the comparison's rows and in the audit batch."
    with_eps = sorted(n for n, c in mechanisms().items() if "epsilon" in c.parameter_names())
    compared = {c.mechanism for c in compare.CONTENDERS + compare.NO_GUARANTEE}
    excused = {n for n, c in cards().items() if c.not_compared}
    missing = [n for n in with_eps if n not in compared and n not in excused]
    assert not missing, f"mechanisms with epsilon and no row in compare.CONTENDERS (or NO_GUARANTEE): {missing}"
    unaudited = sorted(set(with_eps) - {name for _, name, _ in audit.BATCH})
    assert not unaudited, f"mechanisms with epsilon and no row in audit.BATCH: {unaudited}"
    assert set(with_eps) <= set(audit.AUDITS) and set(with_eps) <= set(cards())


def test_cards_are_consistent():
    cs = cards()
    assert all(isinstance(c, Card) and c.role in ROLES for c in cs.values())
    rows = [r for c in cs.values() for r in c.rows]
    labels = [r.label for r in rows]
    assert len(labels) == len(set(labels)), "comparison labels must be unique"
    assert all(r.mechanism in mechanisms() for c in cs.values() for r in c.rows + c.user_rows)
    batch = [label for label, _, _ in audit.BATCH]
    assert len(batch) == len(set(batch)) and len({at for c in cs.values() for at, _, _ in c.audits}) == len(batch)
    for c in cs.values():
        assert c.notebook and (ROOT / "nbs" / f"{c.notebook}.ipynb").exists(), c
        assert (c.guaranteed is None) == (c.unit == "none"), c
        for label, unit, eps in c.paper_rows:
            assert label in {r.label for r in c.rows} and (unit is None) == (eps is None), (label, unit, eps)
    assert compare.RELEASE_NOTHING and set(compare.RELEASE_NOTHING) <= {b.label for b in compare.BASELINES}
    assert all(r.unit != "none" for r in compare.CONTENDERS) and all(r.unit == "none" for r in compare.NO_GUARANTEE)


def test_the_studies_read_the_cards():
    "The papers with a row against releasing nothing are the papers table's; every card's notebook is stored with outputs."
    papers = {c.paper for c in cards().values() if c.paper}
    assert {k for k, *_ in compare.PAPER_ROWS} == papers and set(audit.PAPER_AUDITS) <= papers
    assert all(label in {l for l, _, _ in audit.BATCH} for labels in audit.PAPER_AUDITS.values() for label in labels)
    assert {c.notebook for c in cards().values()} <= set(outputs.PAPER_NOTEBOOKS)
    index = (ROOT / "nbs" / "index.ipynb").read_text(encoding="utf-8")
    assert all(f"| `{k}` |" in index for k in papers), "every card's paper has a row in the papers table"
    at = [index.index(f"| `{k}` |") for k in dict.fromkeys(k for k, *_ in compare.PAPER_ROWS)]
    assert at == sorted(at), "the papers' rows against releasing nothing follow the papers table"


def test_a_paper_declares_rows_that_build_another_mechanism():
    "The public-features paper's card carries the DPALS rows it proposes; the DPALS card does not know them."
    public = cards()["dp-bias-features"]
    assert {"dpals + CMF (Curmei et al.)", "dpals + local features, α tuned (ours)"} <= {r.label for r in public.rows}
    assert [r.label for r in cards()["dpals"].rows] == ["dpals", "dpals, tail sampling", "dpals (d = 8, T = 2, τ = 100: Google's ML-10M setting at ε = 1)"]
    assert all(r.mechanism == "dpals-adaptive" for r in cards()["dpals-adaptive"].rows)
    assert cards()["user-features"].role == "floor"
