"""The package's folders are its layers: a module imports only from its own layer or the ones below, never another
module's `_private` names, and the import graph (imports inside functions included) has no cycle."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "dpmf_lit"
# bottom first: validators, settings, metrics, kernels and the privacy toolkit; the data model; the records of the batch
# (what a notebook reads and writes); the mechanism interface; one module per paper; the studies across papers; the batch
# that runs the notebooks and stores their outputs; the CLI
LAYERS = ("core", "data", "records", "model", "papers", "studies", "batch", "cli")


def _name(path: Path) -> str:
    return ".".join(("dpmf_lit", *path.relative_to(PKG).with_suffix("").parts)).removesuffix(".__init__")


MODULES = {_name(p): p for p in sorted(PKG.rglob("*.py")) if p.name != "_modidx.py"}


def _is_pkg(mod: str) -> bool:
    return MODULES.get(mod, Path()).name == "__init__.py"


def _layer(mod: str) -> int:
    parts = mod.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 else -1   # the top package holds only its docstring


def _imports(mod: str) -> list[tuple[str, str, int]]:
    "(imported module, imported name or '', line) of every import anywhere in `mod`, relative imports resolved."
    here = mod.split(".") if _is_pkg(mod) else mod.split(".")[:-1]
    out, aliases = [], {}
    tree = ast.parse(MODULES[mod].read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level: base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
            elif (node.module or "").split(".")[0] == "dpmf_lit": base = node.module
            else: continue
            for a in node.names:
                if f"{base}.{a.name}" in MODULES:
                    out.append((f"{base}.{a.name}", "", node.lineno)); aliases[a.asname or a.name] = f"{base}.{a.name}"
                else: out.append((base, a.name, node.lineno))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "dpmf_lit":
                    out.append((a.name, "", node.lineno)); aliases[a.asname or a.name] = a.name
    for node in ast.walk(tree):   # module._private, through a module bound by an import
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            out.append((aliases[node.value.id], node.attr, node.lineno))
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_every_module_sits_in_a_layer_folder():
    loose = [m for m in MODULES if m != "dpmf_lit" and m.split(".")[1] not in LAYERS]
    assert not loose, f"modules outside the layer folders {LAYERS}: {loose}"


def test_no_module_imports_from_a_higher_layer():
    bad = [f"{m}:{line} imports {dep} ({LAYERS[_layer(dep)]} is above {LAYERS[_layer(m)]})"
           for m in MODULES if m != "dpmf_lit" for dep, _, line in _imports(m) if dep in MODULES and _layer(dep) > _layer(m)]
    assert not bad, "\n".join(bad)


def test_no_module_takes_another_modules_private_names():
    bad = [f"{m}:{line} takes {dep}.{name}" for m in MODULES for dep, name, line in _imports(m)
           if dep != m and _private(name)]
    assert not bad, "make the name public (documented) or move it to the module that uses it:\n" + "\n".join(bad)


def _graph() -> dict:
    return {m: {dep for dep, _, _ in _imports(m) if dep in MODULES and dep != m} for m in MODULES}


def test_the_import_graph_has_no_cycle():
    graph, state = _graph(), {}
    def visit(m, path):
        if state.get(m) == "done": return
        assert state.get(m) != "open", f"import cycle: {' -> '.join(path + [m])}"
        state[m] = "open"
        for d in sorted(graph[m]): visit(d, path + [m])
        state[m] = "done"
    for m in graph: visit(m, [])


def test_the_privacy_toolkit_does_not_depend_on_matrix_factorization():
    graph = _graph()
    def closure(m):
        out, todo = set(), [m]
        while todo:
            for d in graph[todo.pop()] - out: out.add(d); todo.append(d)
        return out
    assert not closure("dpmf_lit.core.privacy") & {"dpmf_lit.model.mf", "dpmf_lit.model.mechanism", "dpmf_lit.core.kernels"}
    assert not closure("dpmf_lit.core.stats") - {"dpmf_lit.core.checks", "dpmf_lit.core"}   # shared statistics sit at the bottom


@pytest.mark.parametrize("rule", ["higher", "private", "cycle"])
def test_the_rules_catch_what_they_forbid(rule, tmp_path, monkeypatch):
    "Each rule fails on a module written to break it (the checks are not vacuous)."
    src = {"higher": "from ..studies.compare import pick\n", "private": "from .checks import _never\n",
           "cycle": "from ..core.probe_b import x\n"}[rule]
    a, b = PKG / "core" / "probe_a.py", PKG / "core" / "probe_b.py"
    monkeypatch.setitem(MODULES, "dpmf_lit.core.probe_a", a)
    monkeypatch.setitem(MODULES, "dpmf_lit.core.probe_b", b)
    texts = {a: src, b: "from .probe_a import y\n" if rule == "cycle" else ""}
    monkeypatch.setattr(Path, "read_text", lambda self, encoding=None, _t=Path.read_text: texts[self] if self in texts
                        else _t(self, encoding=encoding))
    test = {"higher": test_no_module_imports_from_a_higher_layer, "private": test_no_module_takes_another_modules_private_names,
            "cycle": test_the_import_graph_has_no_cycle}[rule]
    with pytest.raises(AssertionError): test()


def test_one_meaning_per_public_name():
    "No public name is defined (def, class or assignment at the top) by two modules; `main` (a runnable module's entry) aside."
    owners = {}
    for m, path in MODULES.items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                methods = any(getattr(d, "id", getattr(d, "attr", "")) == "patch" for d in node.decorator_list)
                names = [] if methods else [node.name]   # a method @patch-ed onto its class overrides, by design
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                names = [t.id for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)]
            else: continue
            for n in names:
                if not n.startswith("_") and n != "main": owners.setdefault(n, set()).add(m)
    twice = {n: sorted(ms) for n, ms in owners.items() if len(ms) > 1}
    assert not twice, f"public names defined in more than one module: {twice}"


def test_the_top_level_names_resolve_to_their_layer_modules():
    "`from dpmf_lit import …` gives each name of the top-level API from its layer module; any other name is refused."
    import importlib
    import dpmf_lit
    for name, module in dpmf_lit._API.items():
        assert getattr(dpmf_lit, name) is getattr(importlib.import_module(f"dpmf_lit.{module}"), name), name
        assert name in dir(dpmf_lit)
    from dpmf_lit import get_mechanism, load_dataset, random_split   # the README's example
    assert callable(get_mechanism) and callable(load_dataset) and callable(random_split)
    with pytest.raises(AttributeError, match="no attribute 'hua'"):
        dpmf_lit.hua   # the flat modules are gone: a paper lives in dpmf_lit.papers
