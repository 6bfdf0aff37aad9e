"""The documentation site: processing works wherever the clone lives (also under a dot folder),
every page, link and figure resolves, `make docs` never tries to install Quarto, the offline
preview typesets math with a local MathJax and loads every figure in headless Chromium, README.md
is generated from nbs/index.ipynb, and every module is listed in the package docs."""
import json, os, pkgutil, re, shutil, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dpmf_lit.batch import site

ROOT = Path(__file__).resolve().parents[1]
NBS = sorted(p for p in (ROOT / "nbs").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
PAGES = sorted(p.relative_to(ROOT / "nbs").as_posix() for p in NBS)


# Processing the site (proc) takes 10-40 s on 2 cores, the preview 15-30 s more: the tests that may be the first
# to need them are in the slow lane with this limit (pytest-timeout counts that setup in the test's limit).
SITE_BUILD_LIMIT = 600


@pytest.fixture(scope="module")
def proc():
    return site.process_site(root=ROOT)


@pytest.mark.slow
@pytest.mark.timeout(SITE_BUILD_LIMIT)
def test_site_pages_links_and_figures_resolve(proc):
    """Runs nbdev-proc-nbs (without its Quarto download) and checks every page, internal link and
    figure reference of the processed site."""
    assert (proc / "sidebar.yml").exists() and (proc / "index.ipynb").exists()
    sidebar = (proc / "sidebar.yml").read_text()
    numbered = [p.name for p in NBS if p.parent.name == "nbs" and p.name[:2].isdigit()]
    assert all(name in sidebar for name in numbered), f"sidebar misses some of {numbered}"
    assert check_pages(proc) == PAGES
    assert site.check_site(proc) == []


def check_pages(proc: Path) -> list:
    return sorted(p.relative_to(proc).as_posix() for p in proc.rglob("*.ipynb"))


def _copy_project(dst: Path) -> Path:
    "The files a clone has that the site build reads, copied to `dst` (links kept as links)."
    dst.mkdir(parents=True)
    for name in ("pyproject.toml", "settings.ini", "README.md", "_quarto.yml"):
        shutil.copy(ROOT / name, dst / name)
    shutil.copytree(ROOT / "nbs", dst / "nbs", symlinks=True, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "sidebar.yml"))
    shutil.copytree(ROOT / "figures", dst / "figures")
    shutil.copytree(ROOT / "dpmf_lit", dst / "dpmf_lit", ignore=shutil.ignore_patterns("__pycache__"))
    return dst


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_make_docs_works_under_a_dot_folder_without_quarto(tmp_path, monkeypatch, capsys):
    """A clone under ~/.cache/... : nbdev skips every path with a dot part, which left _proc/ with the
    figures only. And without Quarto nothing may try to download or install it."""
    import nbdev.quarto
    clone = _copy_project(tmp_path / ".cache" / "work" / "dpmf-lit")
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "quarto" else real_which(name, *a, **k))
    def no_install(*a, **k): raise AssertionError("make docs tried to install Quarto")
    monkeypatch.setattr(nbdev.quarto, "install_quarto", no_install)
    monkeypatch.setattr(nbdev.quarto.install_quarto, "__wrapped__", no_install, raising=False)
    here = Path.cwd()
    assert site.build_docs(root=clone) == 0
    assert Path.cwd() == here                                              # nbdev's chdir is undone
    out = capsys.readouterr().out
    assert "Quarto is not installed, so the site was not rendered (nothing was downloaded or installed)" in out
    assert "make preview" in out
    proc = clone / "_proc"
    assert check_pages(proc) == PAGES, "pages missing from _proc/ under a dot folder"
    assert (proc / "sidebar.yml").exists() and site.check_site(proc) == []


def test_make_docs_and_preview_use_the_site_module():
    "`make docs` must not call nbdev-proc-nbs (it downloads Quarto with sudo); `make preview` writes the preview."
    text = subprocess.run(["make", "-n", "docs", "preview", "readme"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout
    assert "nbdev-proc-nbs" not in text and "nbdev-docs" not in text
    assert "-m dpmf_lit.batch.site --docs" in text and "-m dpmf_lit.batch.site --preview site-preview" in text
    assert "-m dpmf_lit.batch.site --readme" in text


# --- the code under each formula ---

def _paper_notebooks() -> list:
    "Every paper notebook: the stored-output list and each mechanism card's notebook."
    from dpmf_lit.batch.outputs import PAPER_NOTEBOOKS
    from dpmf_lit.model.cards import notebooks
    return sorted(set(PAPER_NOTEBOOKS) | set(notebooks()))


def _cells(name: str) -> list:
    return json.loads((ROOT / "nbs" / f"{name}.ipynb").read_text(encoding="utf-8"))["cells"]


def _code(cell: dict) -> str:
    "A code cell's source without its #| lines, as the site shows it."
    return "\n".join(l for l in "".join(cell["source"]).splitlines() if not l.startswith("#|")).strip("\n")


def test_paper_notebooks_show_the_code_under_each_formula():
    """The code right under each formula is on the site: every formula cell (dpmf_lit.batch.site.formula_cells)
    of every paper notebook is marked `#| exports`, not `#| export` (which shows only its show_doc)."""
    names = _paper_notebooks()
    assert {"03_hua_dpmf", "10_dpals", "11_compare", "12_audit"} <= set(names), names
    found = {n: site.formula_cells(_cells(n)) for n in names}
    assert len(found["10_dpals"]) >= 5 and len(found["03_hua_dpmf"]) >= 3, found        # the rule finds them
    hidden = [f"{n} cell {_cells(n)[i]['id']}: {_code(_cells(n)[i]).splitlines()[0][:70]}"
              for n, idx in found.items() for i in idx if not site.shows_source(_cells(n)[i])]
    assert not hidden, "formula cells marked #| export (their source is not on the site; mark them #| exports):\n  " + "\n  ".join(hidden)


# --- the offline preview ---

@pytest.fixture(scope="module")
def preview_dir(proc, tmp_path_factory):
    out = tmp_path_factory.mktemp("preview")
    site.preview(out, proc)
    return out


def _local_refs(html: str) -> list:
    "The local targets of href and src attributes in `html` (not text that looks like them)."
    from html.parser import HTMLParser
    refs = []
    class Refs(HTMLParser):
        def handle_starttag(self, tag, attrs):
            refs.extend(v for k, v in attrs if k in ("href", "src") and v)
    Refs().feed(html)
    refs = [r.split("#", 1)[0].split("?", 1)[0] for r in refs]
    return [r for r in refs if r and not re.match(r"^[a-z][a-z0-9+.-]*:", r, re.I)]


@pytest.mark.slow
@pytest.mark.timeout(SITE_BUILD_LIMIT)
def test_preview_pages_are_offline_without_front_matter_and_linked(preview_dir):
    pages = sorted(preview_dir.rglob("*.html"))
    assert len(pages) == len(PAGES)
    mathjax = preview_dir / "_static" / "mathjax" / "tex-svg-full.js"
    assert mathjax.stat().st_size > 1_000_000                              # MathJax itself, not a stub
    for page in pages:
        html = page.read_text(encoding="utf-8")
        name = page.relative_to(preview_dir).as_posix()
        assert not re.search(r"<script[^>]*\ssrc=\"https?://", html), f"{name} loads a script from the network"
        assert "MathJax.Hub.Config" not in html, f"{name} still carries nbconvert's MathJax 2 set-up"
        assert not re.search(r"<main>\s*---|^(?:output-file|description): ", html, re.M), f"{name} shows its front matter"
        assert html.count('<nav class="preview-sidebar">') == 1 and html.count('<li class="current">') == 1, name
        missing = [r for r in _local_refs(html) if not (page.parent / r).exists()]
        assert not missing, f"{name}: links or images that do not resolve: {missing}"


def _chromium_or_skip():
    if site.find_chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the browser check: .ci/run installs Debian's chromium")
        pytest.skip("no Chromium on PATH, so the preview cannot be opened in a browser (on Debian: apt-get install chromium)")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_preview_typesets_math_and_loads_every_figure_in_a_browser(preview_dir):
    _chromium_or_skip()
    pages = sorted(preview_dir.rglob("*.html"))
    with ThreadPoolExecutor(2) as pool:
        seen = dict(zip(pages, pool.map(site.browser_status, pages)))
    problems = []
    for page, s in seen.items():
        name = page.relative_to(preview_dir).as_posix()
        if "math" not in s: problems.append(f"{name}: MathJax did not run (no status)"); continue
        if s["math-errors"] != "0": problems.append(f"{name}: {s['math-errors']} formulas MathJax could not parse")
        loaded, total = map(int, s["images"].split("/"))
        if loaded != total: problems.append(f"{name}: figures that did not load: {s['broken-images']}")
        raw = re.findall(r".{0,40}(?:\$\$|\$\\[a-zA-Z]+|\\(?:frac|mathbb|varepsilon)\b).{0,40}", s["text"])
        if raw: problems.append(f"{name}: raw TeX in the rendered text: {raw[:3]}")
    assert not problems, "\n".join(problems)
    hua = seen[preview_dir / "hua_dpmf.html"]
    assert int(hua["math"].split()[0]) > 100 and int(hua["images"].split("/")[1]) >= 1, hua


# --- README and the package's list of modules ---

def test_readme_is_generated_from_the_index_notebook():
    assert (ROOT / "README.md").read_text(encoding="utf-8") == site.readme_text(ROOT), \
        "README.md differs from nbs/index.ipynb: edit the notebook, then run 'make readme'"


def test_readme_follows_the_index_notebook(tmp_path):
    import nbformat
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "nbs").mkdir()
    nb = nbformat.read(ROOT / "nbs" / "index.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("A new line, see [the data](00_data.ipynb)."))
    nb.cells.append(nbformat.v4.new_markdown_cell("#| hide\nnot in the README"))
    nbformat.write(nb, tmp_path / "nbs" / "index.ipynb")
    text = site.readme_text(tmp_path)
    assert text.startswith(site.README_NOTE) and "# dpmf-lit" in text
    assert text.rstrip().endswith("A new line, see [the data](nbs/00_data.ipynb).") and "not in the README" not in text
    assert site.write_readme(tmp_path).read_text(encoding="utf-8") == text


def test_papers_table_says_what_reproduced_and_what_did_not():
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## The papers"):].split("\n## ")[0]
    status = {l.split("|")[1].strip(" `"): l.split("|")[-2] for l in section.splitlines() if l.startswith("| `")}
    assert set(status) == {"hua", "pdp", "sgld", "gauss", "xin", "dpals", "public"}
    for key, s in status.items():
        assert "**Reproduced:**" in s, key
        assert any(w in s for w in ("**Not reproduced:**", "**Did not hold:**", "**Not a DP result:**", "**Not checked:**")), key
        assert "**reproduced**" not in s, f"{key}: a bare 'reproduced' says nothing of what did not"


def test_every_module_and_notebook_is_listed():
    import dpmf_lit
    modules = [m.name.removeprefix("dpmf_lit.") for m in pkgutil.walk_packages(dpmf_lit.__path__, "dpmf_lit.")
               if not m.name.split(".")[-1].startswith("_") and not m.ispkg]   # the layer packages are folders
    llms = (ROOT / "nbs" / "llms.txt").read_text()
    init = (ROOT / "dpmf_lit" / "__init__.py").read_text()
    missing = [m for m in modules if f"`dpmf_lit.{m}`" not in init or f"[dpmf_lit.{m}]" not in llms]
    assert not missing, f"missing from dpmf_lit/__init__.py or nbs/llms.txt (run nbdev-export): {missing}"
    index = (ROOT / "nbs" / "index.ipynb").read_text()
    numbered = [p.name for p in NBS if p.parent.name == "nbs" and p.name[:2].isdigit()]
    unlisted = [n for n in numbered if f"]({n})" not in index]
    assert not unlisted, f"notebooks missing from the table in nbs/index.ipynb: {unlisted}"


def test_export_lists_every_module_by_configuration():
    import nbdev.config
    assert "dpmf_lit.batch.site:ListEveryModule" in nbdev.config.get_config(ROOT).get("export_procs", [])
    saved = nbdev.config._substantive
    try:
        site.ListEveryModule().begin()
        assert nbdev.config._substantive("One line.\n\nDocs: https://x")      # nbdev's own rule says False
    finally: nbdev.config._substantive = saved
