"""The documentation site: processing works wherever the clone lives (also under a dot folder),
every page, link and figure resolves, `make docs` never tries to install Quarto, the offline
preview reads well in headless Chromium (math typeset, figures loaded and not squeezed, nothing past
its box, no prompts, tables as tables, signatures as written, the code under each formula), the
result tables are displayed, not printed, README.md is generated from nbs/index.ipynb, and every
module is listed in the package docs."""
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
    assert len(found["11_compare"]) >= 3 and len(found["12_audit"]) >= 3, found     # the studies' formulas too
    hidden = [f"{n} cell {_cells(n)[i]['id']}: {_code(_cells(n)[i]).splitlines()[0][:70]}"
              for n, idx in found.items() for i in idx if not site.shows_source(_cells(n)[i])]
    assert not hidden, "formula cells marked #| export (their source is not on the site; mark them #| exports):\n  " + "\n  ".join(hidden)


# --- result tables and signatures ---

def _section_outputs(name: str, first: str, last: str | None = None) -> list:
    """The outputs of notebook `name`'s code cells from its heading starting `first` to the one starting `last` (or the
    end), run in an IPython shell after the notebook's exported and hidden cells (its imports and definitions)."""
    from execnb.shell import CaptureShell
    from dpmf_lit.batch.outputs import directives
    cells = _cells(name)
    heads = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and "".join(c["source"]).startswith(first)]
    ends = [i for i, c in enumerate(cells) if last and c["cell_type"] == "markdown" and "".join(c["source"]).startswith(last)]
    a, b = heads[0], (ends or [len(cells)])[0]
    marked = lambda c: {"export", "exports", "exporti", "hide"} & directives("".join(c["source"])).keys()
    setup = [c for c in cells[:a] if c["cell_type"] == "code" and marked(c)]
    shell, outputs = CaptureShell(), []
    for i, c in enumerate(setup + [c for c in cells[a:b] if c["cell_type"] == "code"]):
        out = shell.run("".join(c["source"]))
        assert shell.exc is None, f"{name}: {''.join(c['source'])[:200]}\n{shell.exc!r}"
        if i >= len(setup): outputs += out
    return outputs


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name, first, last, n_tables", [("11_compare", "## 8", "## 10", 5),
                                                         ("13_public_features", "## 6", "## References", 3)])
def test_result_tables_are_displayed_as_tables(name, first, last, n_tables, monkeypatch):
    """The result tables are displayed markdown, which GitHub, Quarto and the preview render as tables; printed, a
    markdown table is a monospaced block of pipes and dashes. (The stored outputs follow at the next `make outputs`.)"""
    monkeypatch.chdir(ROOT / "nbs")
    outputs = _section_outputs(name, first, last)
    text = ["".join(o.get("text", "")) for o in outputs if o["output_type"] == "stream"]
    text += ["".join(o["data"]["text/plain"]) for o in outputs if set(o.get("data", {})) == {"text/plain"}]
    printed = [t for t in text if site._TABLE_RULE.search(t)]
    assert not printed, f"{name}: markdown tables printed as text (display them: display(Markdown(...))):\n" + printed[0][:300]
    shown = ["".join(o["data"]["text/markdown"]) for o in outputs if "text/markdown" in o.get("data", {})]
    assert sum(bool(site._TABLE_RULE.search(m)) for m in shown) == n_tables, shown


def test_signatures_show_annotations_as_written(monkeypatch):
    """show_doc, as the site runs it (`renderer` in pyproject.toml), shows each annotation as written. Our modules say
    `from __future__ import annotations`, and nbdev's own renderer shows a string annotation holding a quote as a
    quoted string: `unit:"Unit('rating')"='rating'`."""
    import nbdev.config
    from nbdev.showdoc import show_doc
    from dpmf_lit.papers.pdp import DPPMF
    monkeypatch.chdir(ROOT)
    assert nbdev.config.get_config().get("renderer") == "dpmf_lit.batch.site.show_doc_renderer"
    md = show_doc(DPPMF)._repr_markdown_()
    signature = md[md.index("```python"):].split("```")[1]
    assert "unit:Unit('rating')='rating'," in signature, signature
    quoted = [l for l in signature.splitlines() if site._QUOTED_ANNOTATION.search(l.split(" # ")[0])]
    assert not quoted, quoted


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
    pages, aliases = _pages(preview_dir), _aliases(preview_dir)
    assert len(pages) == len(PAGES)
    for alias, to in aliases.items():     # a page's address read off its notebook's name redirects to the page
        assert (preview_dir / alias).with_suffix(".ipynb").name in PAGES and (preview_dir / to) in pages, (alias, to)
    assert aliases["11_compare.html"] == "compare.html" and "index.html" not in aliases
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


_REFRESH = re.compile(r'<meta http-equiv="refresh" content="0; url=([^"]+)">')

def _pages(preview_dir: Path) -> list:
    "The preview's pages, without the redirects from the notebooks' own names."
    return sorted(p for p in preview_dir.rglob("*.html") if not _REFRESH.search(p.read_text(encoding="utf-8")))

def _aliases(preview_dir: Path) -> dict:
    "Each redirect page of the preview -> the page it sends the reader to."
    found = {p.relative_to(preview_dir).as_posix(): _REFRESH.search(p.read_text(encoding="utf-8")) for p in preview_dir.rglob("*.html")}
    return {k: m.group(1) for k, m in found.items() if m}


def _chromium_or_skip():
    if site.find_chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the browser check: .ci/run installs Debian's chromium")
        pytest.skip("no Chromium on PATH, so the preview cannot be opened in a browser (on Debian: apt-get install chromium)")


def formula_code(proc: Path) -> dict:
    "The first code line of each formula cell of every paper notebook, by the notebook's preview page."
    code = {site._page(proc, f"{n}.ipynb")["html"]: [_code(_cells(n)[i]).splitlines()[0] for i in site.formula_cells(_cells(n))]
            for n in _paper_notebooks()}
    return {page: lines for page, lines in code.items() if lines}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_preview_typesets_math_and_loads_every_figure_in_a_browser(preview_dir, proc):
    """Every page in a browser 1280 pixels wide (`site.page_problems`): math typeset, figures loaded and not squeezed,
    no content past its box, text outputs that break lines only between words, no prompts, every table a table,
    signatures without quoted annotations, and on each paper's page the code of each of its formula cells."""
    _chromium_or_skip()
    pages = _pages(preview_dir)
    formulas = formula_code(proc)
    assert len(formulas["dpals.html"]) >= 5 and sum(map(len, formulas.values())) >= 30, formulas
    with ThreadPoolExecutor(2) as pool:
        seen = dict(zip(pages, pool.map(site.browser_status, pages)))
    names = {page: page.relative_to(preview_dir).as_posix() for page in pages}
    problems = [f"{names[page]}: {p}" for page, s in seen.items() for p in site.page_problems(s, formulas.get(names[page], ()))]
    assert not problems, "\n".join(problems)
    hua = seen[preview_dir / "hua_dpmf.html"]
    assert int(hua["math"].split()[0]) > 100 and int(hua["images"].split("/")[1]) >= 1, hua
    assert any("def user_step(" in b for b in seen[preview_dir / "dpals.html"]["code"])        # the check reads code blocks
    assert seen[preview_dir / "compare.html"]["tables"] >= 5 and seen[preview_dir / "index.html"]["images"] == "18/18"


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


def test_readme_is_a_front_door():
    "At most 150 lines: the site-only sections left out, the comparisons brief (answer, figure, link), every named heading real."
    import nbformat
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150, f"README.md has {len(text.splitlines())} lines"
    index = [c.source for c in nbformat.read(ROOT / "nbs" / "index.ipynb", as_version=4).cells if c.cell_type == "markdown"]
    headings = {site._heading(s) for s in index}
    missing = [h for h in (*site.README_OMIT, *site.README_BRIEF) if h not in headings]
    assert not missing, f"README_OMIT / README_BRIEF name headings nbs/index.ipynb does not have: {missing}"
    for h in site.README_OMIT: assert f"\n{h}\n" not in text, h
    for h, (notebook, figure) in site.README_BRIEF.items():
        section = text[text.index(f"\n{h}\n") + 1:].split("\n## ")[0]
        assert "**The answer.**" in section and f"]({figure})" in section and f"](nbs/{notebook})" in section, h
        assert "\n|" not in section, f"{h}: a table in the README's brief section"
    for target in re.findall(r"\]\(((?:nbs|figures)/[^)#]+)", text): assert (ROOT / target).exists(), target


def test_papers_table_says_what_reproduced_and_what_did_not():
    import nbformat
    text = "\n".join(c.source for c in nbformat.read(ROOT / "nbs" / "index.ipynb", as_version=4).cells)
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
