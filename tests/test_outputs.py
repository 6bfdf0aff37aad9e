"""A reader sees the results: the paper notebooks are stored with their outputs (`dpmf_lit.batch.outputs`).

The stored outputs are current (the stamps of figures/outputs.json match the code, the records quoted and the
outputs in the files), every cell that quotes a number or shows a table has an output — in the notebook, as
GitHub shows it, and on its page of the offline preview — running a notebook twice gives the same bytes, and
the preview shows cells as Quarto does (no `show_doc` call under `echo: false`, the source of `exports` cells)."""
import ast, json, re, subprocess, sys
from pathlib import Path

import pytest

from dpmf_lit.batch import outputs, site
from dpmf_lit.records.provenance import _VERSIONED, versions
from dpmf_lit.core.settings import load_settings

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = load_settings(ROOT / "settings.ini")
PAPERS = outputs.paper_notebooks(SETTINGS)
REFRESH = "make outputs (or: dpmf reproduce --outputs --only '<notebook>')"


def _pins() -> dict:
    "Library versions pinned in .ci/constraints.txt for the libraries a stamp records."
    pins = {}
    for line in (ROOT / ".ci" / "constraints.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==([^ ;]+)", line.strip())
        if m: pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return {k: pins[k] for k in _VERSIONED if k in pins}


def test_stored_outputs_are_current():
    env, pins = versions(), _pins()
    if any(env.get(k) != v for k, v in pins.items()):
        pytest.skip(f"this environment is not the pinned one ({ {k: env.get(k) for k in pins} }); stamps are checked under the pins")
    rows = outputs.outputs_status(SETTINGS)
    bad = [r for r in rows if r["state"] != "current"]
    assert rows and not bad, ("paper notebooks whose stored outputs are not the ones their code makes "
                              f"(refresh with {REFRESH}):\n" + outputs.format_outputs_status(rows))


def test_every_notebook_that_quotes_results_is_a_paper_notebook():
    quoting = sorted(p.stem for p in (ROOT / "nbs").glob("0*.ipynb") if re.search(r"\bquotes?\(", p.read_text()))
    assert quoting and set(quoting) <= set(outputs.PAPER_NOTEBOOKS), \
        f"{sorted(set(quoting) - set(outputs.PAPER_NOTEBOOKS))} quote results but are not in dpmf_lit.batch.outputs.PAPER_NOTEBOOKS"


# --- which cells must show something ---

_PRINTS = {"print", "display", "quote", "quotes", "entry_table"}
_TABLES = {"DataFrame", "Series", "round", "rename_axis", "set_index", "reset_index", "pivot", "pivot_table", "describe",
           "sort_values", "to_frame", "head", "tail", "agg", "query", "assign", "quotes", "entry_table"}


def _name(call) -> str | None:
    return getattr(call.func, "id", getattr(call.func, "attr", None))


def shows_output(source: str) -> bool:
    """A cell that quotes or prints (outside a definition), or whose last statement is a value or a table:
    the cells of the quotes, the audit and verdict tables, and every printed numeric check."""
    if not outputs.runs(source) or outputs.directives(source).get("output") == "false": return False
    try: tree = ast.parse(source)
    except SyntaxError: return False
    def calls(node):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)): return
        if isinstance(node, ast.Call): yield node
        for child in ast.iter_child_nodes(node): yield from calls(child)
    if any(_name(c) in _PRINTS for stmt in tree.body for c in calls(stmt)): return True
    last = tree.body[-1] if tree.body else None
    if not isinstance(last, ast.Expr): return False
    return not isinstance(last.value, ast.Call) or _name(last.value) in _TABLES


def _showing_cells(path: Path) -> list:
    "(cell id, first line) of each code cell of notebook `path` that must show an output, and the cell."
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(c["id"], c) for c in cells if c["cell_type"] == "code" and shows_output("".join(c["source"]))]


def test_the_selection_of_cells_is_not_empty_and_can_fail():
    assert shows_output('quotes("sgld-audit", {"n": 1})') and shows_output("_table") and shows_output("df.round(3)")
    assert shows_output("for k in ks: print(k)") and not shows_output("def f():\n    print(1)")
    assert not shows_output("test_eq(1, 1)") and shows_output("x = quote('a', 'b', 1)") and not shows_output("x = 1")
    assert not shows_output("#| output: false\nprint(time.time())") and not shows_output("#| slow\nprint(1)")
    quoting = [p for p in PAPERS if "quote(" in p.read_text() or "quotes(" in p.read_text()]
    assert len(quoting) >= 7, [p.stem for p in quoting]          # 03-08 and 07a quote the batch's results
    for p in quoting:                                             # the selection finds their quote cells
        assert any("quote" in "".join(c["source"]) for _, c in _showing_cells(p)), p.name


@pytest.mark.parametrize("path", PAPERS, ids=[p.stem for p in PAPERS])
def test_quote_and_table_cells_have_stored_outputs(path):
    empty = [f"cell {cid}: {''.join(c['source']).splitlines()[0][:70]}" for cid, c in _showing_cells(path) if not c.get("outputs")]
    assert not empty, f"{path.name}: cells that quote, print or show a table but store no output (run {REFRESH}):\n  " + "\n  ".join(empty)


# --- the same bytes ---

def test_running_a_paper_notebook_twice_gives_the_same_bytes():
    path = SETTINGS.root / "nbs" / "05_pdp_pmf.ipynb"
    texts = [outputs.with_outputs(path, outputs.execute(path)[0], SETTINGS.root)[0] for _ in range(2)]
    assert texts[0] == texts[1], "two runs of 05_pdp_pmf stored different outputs"
    if outputs.outputs_stale_reason(path, SETTINGS, outputs.load_stamps(SETTINGS)) is None:   # current: the file is what the code makes
        assert texts[0] == path.read_text(encoding="utf-8"), "05_pdp_pmf's stored outputs are current by their stamp, yet a run differs"


def test_status_and_make_targets_name_the_stored_outputs():
    r = subprocess.run([str(Path(sys.executable).parent / "dpmf"), "reproduce", "--status", "--only", "07_*"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.stdout.startswith("stored outputs:") and "07_sgld" in r.stdout, r.stdout + r.stderr
    assert r.returncode == (0 if "1 of 1 paper notebooks current" in r.stdout else 1)
    text = subprocess.run(["make", "-n", "reproduce", "outputs"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert text.count("dpmf reproduce --outputs") == 2, text     # make outputs, and make reproduce's last step


# --- the offline preview ---

@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    "The preview's HTML of each paper notebook, by notebook name."
    proc = site.process_site(root=ROOT)
    out = tmp_path_factory.mktemp("preview")
    site.preview(out, proc)
    return {p.stem: (out / site._page(proc, p.name)["html"]).read_text(encoding="utf-8") for p in PAPERS}


def _cell_html(page: str) -> dict:
    "The HTML of each cell of a preview page, by cell id."
    starts = [(m.start(), m.group(1)) for m in re.finditer(r'<div class="jp-Cell[^"]*"[^>]*id="cell-id=([^"]+)"', page)]
    return {cid: page[a:b] for (a, cid), (b, _) in zip(starts, starts[1:] + [(len(page), None)])}


@pytest.mark.timeout(600)
def test_quote_and_table_cells_show_their_outputs_in_the_preview(pages):
    missing = []
    for p in PAPERS:
        cells = _cell_html(pages[p.stem])
        for cid, c in _showing_cells(p):
            if "jp-OutputArea-output" not in cells.get(cid, ""):
                missing.append(f"{p.stem} cell {cid}: {''.join(c['source']).splitlines()[0][:60]}"
                               + ("" if cid in cells else " (not on the page)"))
    assert not missing, "cells whose output the preview does not show:\n  " + "\n  ".join(missing)


def test_preview_shows_cells_as_quarto_does(pages):
    for name, page in pages.items():
        shown = re.findall(r'<div class="highlight hl-ipython3"><pre>([\s\S]*?)</pre>', page)     # the code cells' sources
        assert not [s for s in shown if "show_doc" in s], f"{name}: a show_doc call (#| echo: false) shows its source"
        assert not [s for s in shown if "#|" in s], f"{name}: a cell shows its #| directives"
    sgld, privacy = pages["07_sgld"], pages["02_privacy"]   # private names: no show_doc, so a definition shown is the source
    assert 'class="nf">_sgld_update<' in sgld and 'class="nf">_fill_normal<' in privacy     # #| exports: the source is shown
    assert 'class="nf">_sgld_range<' not in sgld and 'class="nf">_epoch_key<' not in sgld   # #| export: it is not
    assert "code-fold" not in sgld and "exports: true" not in sgld                            # the directives themselves are not shown
