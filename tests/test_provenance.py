"""Every committed number comes from the committed code (`dpmf_lit.records.provenance`).

The first three tests read the repository as committed: no record from a dirty tree, every quick
entry current by `stale_reason`, records made with the pinned library versions. The others check
the rules themselves on scratch repositories: uncommitted sources are refused before any run, a
record written with --allow-dirty is unpublishable, quoted timings survive a regeneration on
another machine, and `--compare` tells a reproduced number from one that moved."""
import json, os, re, shutil, subprocess, sys
from pathlib import Path

import pytest

from dpmf_lit.records.provenance import (TIMING, _VERSIONED, committed_results, compare_records, format_status, load_manifest,
                                 load_results, stale_reason, source_hashes, status, versions)
from dpmf_lit.core.settings import load_settings

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SETTINGS = load_settings(ROOT / "settings.ini")
RECORDS = load_results(SETTINGS.results_file)


def _pins() -> dict:
    "Library versions pinned in .ci/constraints.txt, for the libraries a record's numbers depend on."
    pins = {}
    for line in (ROOT / ".ci" / "constraints.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==([^ ;]+)", line.strip())
        if m: pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return {k: pins[k] for k in _VERSIONED if k in pins}


def test_no_committed_record_is_dirty():
    dirty = sorted(i for i, r in RECORDS.items() if not r.get("git_revision") or r["git_revision"].endswith("-dirty")
                   or r.get("publishable") is False)
    assert RECORDS and not dirty, (f"records made from uncommitted sources: {dirty}; commit the code, then "
                                   f"`dpmf reproduce --profile quick --only '{','.join(dirty)}'` and commit the records")


def test_records_were_made_with_the_pinned_versions():
    pins = _pins()
    assert pins, "no pins found in .ci/constraints.txt"
    off = sorted({f"{i}: {k} {r['versions'].get(k)} (pinned {v})" for i, r in RECORDS.items()
                  for k, v in pins.items() if r.get("versions", {}).get(k) != v})
    assert not off, f"records made with other library versions than the pins: {off[:5]}; rerun them with `make reproduce`"


def test_committed_quick_entries_are_current():
    env = versions()
    pins = _pins()
    if any(env.get(k) != v for k, v in pins.items()):
        pytest.skip(f"this environment is not the pinned one ({ {k: env.get(k) for k in pins} }); "
                    "the currency of the figures is checked under the pins (make install)")
    recorded_python = {r.get("versions", {}).get("python") for r in RECORDS.values()}
    if recorded_python != {env["python"]}:
        pytest.skip(f"the records were made with Python {sorted(map(str, recorded_python))}, this is {env['python']}")
    rows = status("quick", SETTINGS)
    bad = [r for r in rows if r["state"] != "current"]
    assert rows and not bad, "committed figures that the code does not make any more:\n" + format_status(rows, "quick")


# --- the rules, on scratch clones -----------------------------------------------------------------

def _git(cwd, *args):
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    "A clone of the committed repository, with the working tree's package and tests on top (committed there)."
    dst = tmp_path_factory.mktemp("clone") / "dpmf-lit"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(dst)], check=True)
    for sub in ("dpmf_lit", "nbs"):   # the code under test, which may not be committed yet
        shutil.rmtree(dst / sub)
        shutil.copytree(ROOT / sub, dst / sub, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    _git(dst, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    _git(dst, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "--allow-empty", "-m", "code under test")
    return dst


def _dpmf(cwd, *args, timeout=600):
    env = {**os.environ, "PYTHONPATH": str(cwd), "MPLBACKEND": "Agg"}
    env = {k: v for k, v in env.items() if not k.startswith("DPMF_")}
    return subprocess.run([sys.executable, "-c", "import sys; from dpmf_lit.cli.main import main; sys.exit(main())", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_the_clone_runs_its_own_package(clone):
    r = subprocess.run([sys.executable, "-c", "import dpmf_lit; print(dpmf_lit.__file__)"], cwd=clone,
                       env={**os.environ, "PYTHONPATH": str(clone)}, capture_output=True, text=True, check=True)
    assert Path(r.stdout.strip()).resolve().parent == (clone / "dpmf_lit").resolve()


def test_uncommitted_sources_are_refused_before_any_run(clone):
    mf = clone / "dpmf_lit" / "model" / "mf.py"
    before = (clone / "figures" / "results.json").read_bytes()
    mf.write_text(mf.read_text() + "\nX_UNCOMMITTED = 1\n")
    try:
        r = _dpmf(clone, "reproduce", "--profile", "smoke", "--only", "baseline-pmf-rank", "--no-progress")
        assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("dpmf: error:"), r.stderr
        assert "dpmf_lit/model/mf.py" in r.stderr and "--allow-dirty" in r.stderr and "Traceback" not in r.stderr
        assert (clone / "figures" / "results.json").read_bytes() == before           # nothing written
        assert not (clone / "build" / "smoke" / "baseline-pmf-rank.ipynb").exists()  # nothing ran
    finally:
        _git(clone, "checkout", "--", "dpmf_lit/model/mf.py")


@pytest.mark.slow
def test_allow_dirty_records_are_unpublishable_and_stale(clone):
    nb = clone / "nbs" / "experiments" / "pmf_rank.ipynb"
    nb.write_text(nb.read_text().replace("# numba threads", "# numba threads (edited)", 1))
    try:
        committed = (clone / "figures" / "results.json").read_bytes()
        r = _dpmf(clone, "reproduce", "--profile", "smoke", "--only", "baseline-pmf-rank", "--allow-dirty", "--no-progress")
        assert r.returncode == 0, r.stdout + r.stderr
        assert (clone / "figures" / "results.json").read_bytes() == committed    # the smoke profile never writes the committed record
        assert "figures/profiles/smoke/baseline/pmf_rank.png" in r.stdout
        rec = load_results(clone / "figures" / "profiles" / "smoke" / "results.json")["baseline-pmf-rank"]
        assert rec["publishable"] is False and rec["git_revision"].endswith("-dirty")
        st = _dpmf(clone, "reproduce", "--status", "--profile", "smoke", "--only", "baseline-pmf-rank")
        assert st.returncode == 1 and "uncommitted sources" in st.stdout and "refresh with: dpmf reproduce" in st.stdout
    finally:
        _git(clone, "checkout", "--", ".")


def test_quoted_timings_accept_the_committed_or_the_regenerated_value(tmp_path):
    from dpmf_lit.records.results import quote
    from dpmf_lit.records.provenance import declared_tolerances, tolerance_for
    key = "interleaved.d=16,threads=1.ratio"
    assert tolerance_for(declared_tolerances("sgld-throughput"), key) == TIMING    # declared in the manifest
    res = tmp_path / "results.json"
    def write(ratio, rmse):
        res.write_text(json.dumps([{"id": "sgld-throughput", "numbers": {"interleaved": {"d=16,threads=1": {"ratio": ratio}}}},
                                   {"id": "sgld-epochs", "numbers": {"rmse": rmse}}]))
    write(0.55, 0.958)
    _git(tmp_path, "init", "--quiet"); _git(tmp_path, "add", "results.json")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "committed")
    write(0.62, 0.959)                                   # regenerated on another machine
    assert quote("sgld-throughput", key, 0.55, path=res) == "0.55"    # the prose quotes the committed timing
    assert quote("sgld-throughput", key, 0.62, path=res) == "0.62"    # or the new one
    with pytest.raises(AssertionError, match="prose quotes 0.7"): quote("sgld-throughput", key, 0.70, path=res)
    with pytest.raises(AssertionError, match="prose quotes 0.958"): quote("sgld-epochs", "rmse", 0.958, path=res)
    assert committed_results(res)["sgld-epochs"]["numbers"]["rmse"] == 0.958


def test_compare_tells_reproduced_numbers_from_moved_ones(tmp_path):
    entries = {e.id: e for e in load_manifest(settings=SETTINGS)}
    before = {"sgld-throughput": {"numbers": {"rows": [{"d": 16, "updates_per_s": 1e6}]}},
              "sgld-epochs": {"numbers": {"rmse": 0.958, "epochs": [1, 2]}}}
    after = json.loads(json.dumps(before))
    after["sgld-throughput"]["numbers"]["rows"][0]["updates_per_s"] = 2e6
    kinds = {(r["id"], r["key"]): r["kind"] for r in compare_records(before, after, [entries["sgld-throughput"], entries["sgld-epochs"]])}
    assert kinds == {("sgld-throughput", "rows.0.d"): "equal", ("sgld-throughput", "rows.0.updates_per_s"): "timing",
                     ("sgld-epochs", "rmse"): "equal", ("sgld-epochs", "epochs.0"): "equal", ("sgld-epochs", "epochs.1"): "equal"}
    after["sgld-epochs"]["numbers"]["rmse"] = 0.9581
    (tmp_path / "a.json").write_text(json.dumps([{"id": k, **v} for k, v in before.items()]))
    (tmp_path / "figures").mkdir(); (tmp_path / "figures" / "results.json").write_text(json.dumps([{"id": k, **v} for k, v in after.items()]))
    r = _dpmf(ROOT, "--figures-dir", str(tmp_path / "figures"), "reproduce", "--compare", str(tmp_path / "a.json"), timeout=120)
    assert r.returncode == 1 and "differs  sgld-epochs: rmse  0.958 -> 0.9581" in r.stdout, r.stdout + r.stderr
    r = _dpmf(ROOT, "reproduce", "--compare", "no-such-revision", timeout=120)
    assert r.returncode == 2 and "dpmf: error: --compare 'no-such-revision'" in r.stderr


def test_status_of_a_fresh_scratch_batch_names_no_stale_entry(tmp_path):
    s = load_settings(ROOT / "settings.ini", figures_dir=tmp_path / "f", build_dir=tmp_path / "b", results_file=tmp_path / "f" / "r.json")
    rows = status("quick", s, only="sgld-*")
    assert rows and {r["state"] for r in rows} == {"missing"}
    text = format_status(rows, "quick")
    assert "0 of" in text and "refresh with: dpmf reproduce --profile quick --only 'sgld-" in text
    done = [dict(r, state="current", why=None) for r in rows]
    assert not re.search("stale|changed|missing", format_status(done, "quick"), re.I)   # what the stop hook greps for
