"""Every number the notebooks' prose quotes from `figures/results.json` matches the record, checked in the fast lane.

The notebooks check their own quotes when they run (`quotes(...)` cells), but only `nbdev-test` runs them, in the slow
`make test`; a regenerated record that moves a quoted number then fails only there. This test evaluates every `quote(...)`
and `quotes(...)` call whose arguments are literals, straight from the notebooks' sources, against the committed records."""
import ast
import json
from pathlib import Path
import pytest
from dpmf_lit.records.results import quote, quotes

ROOT = Path(__file__).resolve().parents[1]


def _calls(source: str):
    "The `quote(...)` and `quotes(...)` calls in `source` whose arguments are all literals (the others read variables)."
    try: tree = ast.parse(source)
    except SyntaxError: return
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("quote", "quotes"):
            try:
                args = [ast.literal_eval(a) for a in node.args]
                kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
            except ValueError: continue
            yield node.func.id, args, kwargs, ast.get_source_segment(source, node)


def _notebook_calls():
    for path in sorted((ROOT / "nbs").glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code": continue
            source = "\n".join(l for l in "".join(cell["source"]).splitlines() if not l.lstrip().startswith(("#|", "%", "!")))
            for call in _calls(source): yield path.name, call


CALLS = list(_notebook_calls())


def test_the_notebooks_quote_records():
    "The check below has something to check: the paper notebooks quote many recorded numbers."
    assert len(CALLS) >= 30 and len({nb for nb, _ in CALLS}) >= 8, (len(CALLS), {nb for nb, _ in CALLS})


@pytest.mark.parametrize("notebook, call", CALLS, ids=[f"{nb}:{c[3][:60]}" for nb, c in CALLS])
def test_a_quoted_number_is_the_recorded_one(notebook, call):
    name, args, kwargs, text = call
    try: (quote if name == "quote" else quotes)(*args, **kwargs)
    except AssertionError as e: pytest.fail(f"{notebook}: {e}")
