"""Repository-level checks: the package is in sync with the notebooks, notebooks are clean,
and papermill's parameters tags survive (the documentation site is checked in test_site.py)."""
import json, shutil, subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NBS = sorted(p for p in (ROOT / "nbs").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def _copy_project(dst: Path) -> Path:
    for name in ("pyproject.toml", "settings.ini", "README.md"):
        shutil.copy(ROOT / name, dst / name)
    shutil.copytree(ROOT / "nbs", dst / "nbs", symlinks=True)
    shutil.copytree(ROOT / "dpmf_lit", dst / "dpmf_lit", ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def _tree(folder: Path, pattern: str) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob(pattern))
            if "__pycache__" not in p.parts and ".ipynb_checkpoints" not in p.parts}


def test_nbdev_export_leaves_no_diff(tmp_path):
    proj = _copy_project(tmp_path)
    subprocess.run([str(BIN / "nbdev-export")], cwd=proj, check=True, capture_output=True)
    exported, committed = _tree(proj / "dpmf_lit", "*.py"), _tree(ROOT / "dpmf_lit", "*.py")
    changed = sorted(k for k in exported.keys() | committed.keys() if exported.get(k) != committed.get(k))
    assert not changed, f"dpmf_lit/ is out of sync with nbs/ (run nbdev-export): {changed}"


def test_nbdev_clean_leaves_no_diff(tmp_path):
    proj = _copy_project(tmp_path)
    subprocess.run([str(BIN / "nbdev-clean")], cwd=proj, check=True, capture_output=True)
    cleaned, committed = _tree(proj / "nbs", "*.ipynb"), _tree(ROOT / "nbs", "*.ipynb")
    changed = sorted(k for k in cleaned if cleaned[k] != committed.get(k))
    assert not changed, f"notebooks are not clean (run nbdev-clean): {changed}"


def test_experiment_notebooks_keep_parameters_tag():
    experiments = [p for p in NBS if p.parent.name == "experiments"]
    assert experiments, "no experiment notebooks found in nbs/experiments/"
    for p in experiments:
        cells = json.loads(p.read_text())["cells"]
        tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
        assert len(tagged) == 1, f"{p.name}: expected one cell tagged 'parameters', found {len(tagged)}"


def test_no_executed_papermill_notebooks_in_nbs():
    for p in NBS:
        cells = json.loads(p.read_text())["cells"]
        assert not any("injected-parameters" in c.get("metadata", {}).get("tags", []) for c in cells), \
            f"{p} was executed by papermill in place; executed notebooks belong in the build folder"


def test_top_level_shape():
    for name in ("settings.ini", "README.md", "nbs", "dpmf_lit", "data", "figures", "tests", "_quarto.yml",
                 "pyproject.toml", "Makefile", ".ci/run", ".gitignore", "data/README.md"):
        assert (ROOT / name).exists(), f"{name} is missing"


def test_cells_that_nbdev_runs_for_the_site_stand_alone():
    """nbdev's doc build executes every cell containing an import (and skips the others), so a cell that imports
    and also runs code using earlier names breaks the site build: imports go in cells of their own."""
    import ast, nbformat
    bad = []
    for path in sorted((ROOT / "nbs").rglob("*.ipynb")):
        if ".ipynb_checkpoints" in path.parts: continue
        for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type != "code" or "#| export" in cell.source or "#|export" in cell.source: continue
            try: tree = ast.parse("\n".join(l for l in cell.source.splitlines() if not l.lstrip().startswith(("%", "!"))))
            except SyntaxError: continue
            has_import = any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(tree))
            imported = {a.asname or a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                        for a in n.names}
            def stands_alone(n):   # imports, definitions, a guarded import, or a call on a module this cell imports
                if isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)): return True
                if isinstance(n, ast.Try): return any(isinstance(b, (ast.Import, ast.ImportFrom)) for b in n.body)
                return (isinstance(n, ast.Expr) and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Attribute)
                        and isinstance(n.value.func.value, ast.Name) and n.value.func.value.id in imported)
            runs = [n for n in tree.body if not stands_alone(n)]
            if has_import and runs: bad.append(f"{path.relative_to(ROOT)} cell {i}")
    assert not bad, f"cells mixing imports with other code (split the imports into a cell of their own): {bad}"


# The layers, the import graph and private names: tests/test_layers.py


def test_what_a_build_leaves_in_the_clone_is_ignored():
    "`pip install .` leaves setuptools' build folder (not build/, the batch's outputs) and the egg-info, both git-ignored."
    import configparser
    cfg = configparser.ConfigParser(); cfg.read(ROOT / "setup.cfg")
    base = cfg.get("build", "build_base")
    assert base.strip("./") != "build"
    if not (ROOT / ".git").exists(): pytest.skip("not a git clone")
    for leftover in (f"{base}/lib/dpmf_lit/cli.py", "dpmf_lit.egg-info/PKG-INFO"):
        p = subprocess.run(["git", "check-ignore", "-q", leftover], cwd=ROOT)
        assert p.returncode == 0, f"{leftover} is not ignored by .gitignore"
