"""End-to-end tests of the papermill batch (`dpmf_lit.batch.reproduce`).

Two kinds of manifests are used:
* the repository's own manifest, smoke profile (synthetic data, real experiment notebooks),
  run once per session into temporary figures/build/results folders;
* small temporary manifests with tiny notebooks (no model fitting) to exercise failures,
  `only`, skipping, `force`, the process pool and a local Dask cluster quickly.
"""
import json, os, shutil, sys
from pathlib import Path

import nbformat
import pytest

from dpmf_lit.records.experiment import FIGURE_FORMATS, record, save_figure
from dpmf_lit.records.provenance import ManifestError, load_manifest, load_results
from dpmf_lit.batch.reproduce import reproduce, run_entry
from dpmf_lit.core.settings import load_settings


def tmp_settings(tmp: Path, manifest=None):
    "Settings whose figures, build and results live under `tmp` (data stays the repository's)."
    over = dict(figures_dir=tmp / "figures", build_dir=tmp / "build", results_file=tmp / "figures" / "results.json")
    if manifest is not None: over["manifest"] = manifest
    return load_settings(**over)


def all_files(folder: Path) -> set:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} if folder.exists() else set()


# --- tiny notebooks -------------------------------------------------------------------------------

PARAMS = 'dataset = "synthetic"\nout_dir = None\ndata_dir = None\nthreads = None\nvalue = 1.0\nseed = 0\nfail = False'

GOOD = '''
import matplotlib; matplotlib.use("Agg")
import matplotlib.pyplot as plt
from dpmf_lit.records.experiment import experiment_dir, record, save_figure
out = experiment_dir(out_dir)
for name in NAMES:
    fig, ax = plt.subplots(); ax.plot([0, 1], [0, value]); ax.set_title(name)
    save_figure(fig, out, name)
record({"value": value, "seed": seed, "dataset": dataset}, out)
'''

# writes its first figure, then fails: nothing of it may reach figures/ or results
HALF = GOOD.replace("save_figure(fig, out, name)",
                    "save_figure(fig, out, name)\n    if fail: raise RuntimeError('deliberate failure after ' + name)")

SILENT = "x = 1  # promises a figure but never draws it\n"


def make_notebook(path: Path, body: str, names=("fig",)):
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell(PARAMS)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# a test experiment"), params,
                nbformat.v4.new_code_cell(f"NAMES = {list(names)!r}\n" + body)]
    nbformat.write(nb, str(path))


def make_manifest(tmp: Path, entries: list) -> Path:
    "entries: (id, body, outputs, parameters) tuples; writes notebooks and manifest.json into tmp/exp."
    exp = tmp / "exp"; exp.mkdir(parents=True, exist_ok=True)
    doc = {"entries": []}
    for eid, body, outputs, params in entries:
        make_notebook(exp / f"{eid}.ipynb", body, outputs)
        doc["entries"].append({"id": eid, "paper": "testpaper", "title": eid, "notebook": f"{eid}.ipynb", "outputs": list(outputs),
                               "profiles": {"smoke": {"dataset": "synthetic:n_users=10", "parameters": params}}})
    path = exp / "manifest.json"
    path.write_text(json.dumps(doc, indent=1))
    return path


@pytest.fixture
def three(tmp_path):
    "A manifest of three quick entries: two good, one that fails after writing a figure."
    m = make_manifest(tmp_path, [("alpha", GOOD, ["a1", "a2"], {"value": 2.0}),
                                 ("beta", GOOD, ["b"], {"value": 3.0, "seed": 7}),
                                 ("gamma", HALF, ["g1", "g2"], {"fail": True})])
    return tmp_settings(tmp_path, m)


# --- the repository's manifest, smoke profile ---------------------------------------------------------

# The smoke batch runs every experiment notebook of the manifest: 150-220 s on 2 cores, over 300 s seen under load.
# Its tests are in the slow lane, and each has the batch's own limit, since pytest-timeout counts a module fixture's
# setup in the limit of whichever selected test needs it first (see pyproject.toml).
SMOKE_BATCH_LIMIT = 900


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("smoke")
    s = tmp_settings(tmp)
    summary = reproduce(profile="smoke", settings=s, progress=False)
    return s, summary


@pytest.mark.slow
@pytest.mark.timeout(SMOKE_BATCH_LIMIT)
def test_smoke_profile_end_to_end(smoke):
    s, summary = smoke
    assert summary.exit_code == 0, str(summary)
    all_entries = load_manifest(settings=s)
    assert [o.id for o in summary.outcomes] == [e.id for e in all_entries]
    entries = [e for e in all_entries if e.setting("smoke") is not None]
    assert entries, "no manifest entry has a smoke setting"
    unset = {o.id: o for o in summary.outcomes}
    for e in all_entries:
        if e.setting("smoke") is None:
            assert unset[e.id].status == "skipped" and "no 'smoke' setting" in unset[e.id].note
    records = load_results(s.results_file)
    assert set(records) == {e.id for e in entries}
    for e in entries:
        for name in e.outputs:
            png, svg = (s.figures_dir / e.paper / f"{name}.{fmt}" for fmt in ("png", "svg"))
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
            assert b"<svg" in svg.read_bytes()[:2000]
        rec = records[e.id]
        assert rec["profile"] == "smoke" and rec["dataset"] == e.profiles["smoke"]["dataset"]
        assert rec["parameters"] == e.profiles["smoke"]["parameters"]
        params = e.profiles["smoke"]["parameters"]
        if "seed" in params: assert rec["seed"] == params["seed"], (e.id, rec["seed"])
        else: assert isinstance(rec["seed"], dict) and rec["seed"], f"{e.id}: no seed recorded"
        assert rec["numbers"], f"{e.id} recorded no numbers"
        assert rec["versions"]["numpy"] and rec["versions"]["numba"] and rec["versions"]["dpmf-lit"]
        assert "git_revision" in rec and rec["started"] <= rec["finished"]
        assert (s.build_dir / "smoke" / f"{e.id}.ipynb").is_file() and (s.build_dir / "smoke" / f"{e.id}.log").is_file()
        assert sorted((s.root / p).resolve() for p in rec["outputs"]) == sorted(p.resolve() for p in e.output_paths(s))


@pytest.mark.slow
@pytest.mark.timeout(SMOKE_BATCH_LIMIT)
def test_smoke_numbers_are_sane(smoke):
    s, _ = smoke
    records = load_results(s.results_file)
    rank = records["baseline-pmf-rank"]["numbers"]
    assert len(rank["test_rmse"]) == len(rank["ranks"]) and all(0 < x < 4 for x in rank["test_rmse"])
    epochs = records["baseline-pmf-epochs"]["numbers"]
    assert epochs["train_rmse"][-1] < epochs["train_rmse"][0], "training error must fall with epochs"
    cdf = records["baseline-pmf-error-cdf"]["numbers"]["predictors"]
    assert cdf["PMF"]["rmse"] < cdf["global mean"]["rmse"], "PMF must beat the global mean on low-rank data"


@pytest.mark.slow
@pytest.mark.timeout(SMOKE_BATCH_LIMIT)
def test_up_to_date_entries_are_skipped_then_forced(smoke):
    s, _ = smoke
    png = s.figures_dir / "baseline" / "pmf_rank.png"
    before = png.stat().st_mtime_ns
    again = reproduce(profile="smoke", settings=s, progress=False)
    assert again.exit_code == 0 and {o.status for o in again.outcomes} == {"skipped"}
    smoke_ids = {e.id for e in load_manifest(settings=s) if e.setting("smoke") is not None}
    assert all(o.note == "up to date" for o in again.outcomes if o.id in smoke_ids)
    assert png.stat().st_mtime_ns == before
    forced = reproduce(profile="smoke", settings=s, only="baseline-pmf-rank", force=True, progress=False)
    assert [(o.id, o.status) for o in forced.outcomes] == [("baseline-pmf-rank", "ok")]
    assert png.stat().st_mtime_ns > before


# --- failures, only, skip/force, parallel, dask on tiny manifests ---------------------------------

def check_three(s, summary):
    status = {o.id: o for o in summary.outcomes}
    assert summary.exit_code == 1
    assert status["alpha"].status == "ok" and status["beta"].status == "ok" and status["gamma"].status == "failed"
    g = status["gamma"]
    assert "deliberate failure after g1" in g.error and g.log == s.build_dir / "smoke" / "gamma.failed.log"
    assert "deliberate failure after g1" in g.log.read_text()
    assert "FAILED" in str(summary) and str(g.log) in str(summary)
    figs = all_files(s.figures_dir)
    assert {f"testpaper/{n}.{x}" for n in ("a1", "a2", "b") for x in FIGURE_FORMATS} <= figs
    assert not [f for f in figs if "/g" in f or f.startswith(".") or "/." in f], figs  # no half output, no temporaries
    records = load_results(s.results_file)
    assert set(records) == {"alpha", "beta"}
    assert records["alpha"]["numbers"] == {"value": 2.0, "seed": 0, "dataset": "synthetic:n_users=10"}
    assert records["beta"]["seed"] == 7 and records["beta"]["numbers"]["seed"] == 7
    assert not (s.build_dir / "smoke" / "gamma.stamp").exists()


def test_failing_entry_leaves_nothing_and_others_go_on(three):
    check_three(three, reproduce(profile="smoke", settings=three, progress=False))


@pytest.mark.slow
def test_failing_entry_keeps_previous_good_outputs(tmp_path):
    m = make_manifest(tmp_path, [("half", HALF, ["h1", "h2"], {"fail": False})])
    s = tmp_settings(tmp_path, m)
    assert reproduce(profile="smoke", settings=s, progress=False).exit_code == 0
    good = {p: (s.figures_dir / "testpaper" / p).read_bytes() for p in ("h1.png", "h2.svg")}
    records = load_results(s.results_file)
    doc = json.loads(m.read_text()); doc["entries"][0]["profiles"]["smoke"]["parameters"] = {"fail": True, "value": 9.0}
    m.write_text(json.dumps(doc))
    bad = reproduce(profile="smoke", settings=s, progress=False)
    assert bad.exit_code == 1 and bad.outcomes[0].status == "failed"
    assert {p: (s.figures_dir / "testpaper" / p).read_bytes() for p in good} == good
    assert load_results(s.results_file) == records
    assert (s.build_dir / "smoke" / "half.failed.ipynb").is_file()
    # the kept record still points at the log of its own (good) run; the failure has its own log
    kept_log = (s.root / records["half"]["log"]).read_text()
    assert "# ok after" in kept_log and "deliberate failure" not in kept_log
    assert bad.outcomes[0].log == s.build_dir / "smoke" / "half.failed.log"
    assert "deliberate failure after h1" in bad.outcomes[0].log.read_text()
    # a good run again removes the failure's leftovers
    doc["entries"][0]["profiles"]["smoke"]["parameters"] = {"fail": False, "value": 9.0}
    m.write_text(json.dumps(doc))
    assert reproduce(profile="smoke", settings=s, progress=False).exit_code == 0
    assert not (s.build_dir / "smoke" / "half.failed.log").exists() and not (s.build_dir / "smoke" / "half.failed.ipynb").exists()


def test_missing_output_is_a_failure(tmp_path):
    m = make_manifest(tmp_path, [("silent", SILENT, ["never"], {})])
    s = tmp_settings(tmp_path, m)
    summary = reproduce(profile="smoke", settings=s, progress=False)
    assert summary.exit_code == 1 and "did not write" in summary.outcomes[0].error
    assert not all_files(s.figures_dir)


@pytest.mark.slow
def test_only_skip_force(three):
    s = three
    first = reproduce(profile="smoke", settings=s, only="al*", progress=False)
    assert [(o.id, o.status) for o in first.outcomes] == [("alpha", "ok")]
    assert set(load_results(s.results_file)) == {"alpha"}
    second = reproduce(profile="smoke", settings=s, only="alpha,beta", progress=False)
    assert [(o.id, o.status) for o in second.outcomes] == [("alpha", "skipped"), ("beta", "ok")]
    forced = reproduce(profile="smoke", settings=s, only=["alpha"], force=True, progress=False)
    assert [(o.id, o.status) for o in forced.outcomes] == [("alpha", "ok")]
    with pytest.raises(ValueError, match="matches no entry"):
        reproduce(profile="smoke", settings=s, only="zeta*", progress=False)


@pytest.mark.slow
def test_changed_parameters_make_an_entry_stale(three):
    s = three
    assert reproduce(profile="smoke", settings=s, only="beta", progress=False).outcomes[0].status == "ok"
    assert reproduce(profile="smoke", settings=s, only="beta", progress=False).outcomes[0].status == "skipped"
    doc = json.loads(s.manifest.read_text()); doc["entries"][1]["profiles"]["smoke"]["parameters"]["value"] = 4.0
    s.manifest.write_text(json.dumps(doc))
    rerun = reproduce(profile="smoke", settings=s, only="beta", progress=False).outcomes[0]
    assert rerun.status == "ok" and rerun.note == "stale: changed parameters"
    assert load_results(s.results_file)["beta"]["numbers"]["value"] == 4.0
    (s.figures_dir / "testpaper" / "b.svg").unlink()     # a missing figure also makes it stale
    rerun = reproduce(profile="smoke", settings=s, only="beta", progress=False).outcomes[0]
    assert rerun.status == "ok" and rerun.note == "missing: testpaper/b.svg"
    (s.figures_dir / "testpaper" / "b.png").write_bytes(b"edited")  # a figure the recorded run did not write
    rerun = reproduce(profile="smoke", settings=s, only="beta", progress=False).outcomes[0]
    assert rerun.status == "ok" and rerun.note == "stale: figure files not made by the recorded run: testpaper/b.png"
    (s.build_dir / "smoke" / "beta.stamp").unlink()      # so does a build folder without its stamp (a fresh clone)
    rerun = reproduce(profile="smoke", settings=s, only="beta", progress=False).outcomes[0]
    assert rerun.status == "ok" and rerun.note == "stale: not yet run in this build folder"


@pytest.mark.slow
def test_process_pool(three):
    check_three(three, reproduce(profile="smoke", settings=three, jobs=2, progress=False))


@pytest.mark.slow
def test_dask_local_cluster(three):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        summary = reproduce(profile="smoke", settings=three, dask_address=cluster.scheduler_address, progress=False)
    check_three(three, summary)


def test_profile_missing_from_entry_is_skipped(three):
    summary = reproduce(profile="quick", settings=three, progress=False)
    assert summary.exit_code == 0 and {o.status for o in summary.outcomes} == {"skipped"}
    assert "no 'quick' setting" in summary.outcomes[0].note


# --- bad input ------------------------------------------------------------------------------------

def test_bad_arguments(three):
    with pytest.raises(ValueError, match="profile='huge'"): reproduce(profile="huge", settings=three, progress=False)
    with pytest.raises(ValueError, match="jobs=0"): reproduce(profile="smoke", jobs=0, settings=three, progress=False)
    with pytest.raises(FileNotFoundError, match="nope.json"):
        reproduce(profile="smoke", settings=three, manifest=three.manifest.parent / "nope.json", progress=False)


def test_bad_manifest_messages(tmp_path):
    m = make_manifest(tmp_path, [("alpha", GOOD, ["a"], {})])
    s = tmp_settings(tmp_path, m)
    good = json.loads(m.read_text())["entries"][0]
    cases = [({"id": "a b"}, "id='a b'"), ({"paper": ""}, "paper=''"), ({"notebook": "nope.ipynb"}, "notebook='nope.ipynb'"),
             ({"outputs": ["a", "a"]}, "distinct"), ({"profiles": {"huge": {"dataset": "synthetic"}}}, "profile 'huge'"),
             ({"profiles": {"smoke": {"dataset": "ml-7"}}}, "dataset='ml-7'"),
             ({"profiles": {"smoke": {"dataset": "synthetic", "parameters": {"nosuch": 1}}}}, "['nosuch'] are not in the parameters cell"),
             ({"profiles": {"smoke": {"dataset": "synthetic", "parameters": {"threads": 1}}}}, "set by the runner")]
    for change, message in cases:
        m.write_text(json.dumps({"entries": [{**good, **change}]}))
        with pytest.raises(ManifestError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
            load_manifest(settings=s)
    m.write_text(json.dumps({"entries": [good, good]}))
    with pytest.raises(ManifestError, match="used twice"): load_manifest(settings=s)
    m.write_text("{not json")
    with pytest.raises(ManifestError, match="not valid JSON"): load_manifest(settings=s)
    # a notebook without the parameters the runner injects
    nb = nbformat.v4.new_notebook(); c = nbformat.v4.new_code_cell("value = 1"); c.metadata["tags"] = ["parameters"]; nb.cells = [c]
    nbformat.write(nb, str(m.parent / "alpha.ipynb"))
    m.write_text(json.dumps({"entries": [good]}))
    with pytest.raises(ManifestError, match="must declare parameter"): load_manifest(settings=s)


def test_corrupt_results_file_is_refused_before_running(three):
    three.results_file.parent.mkdir(parents=True, exist_ok=True)
    three.results_file.write_text("[{broken")
    with pytest.raises(ValueError, match="results file .* is not valid JSON"):
        reproduce(profile="smoke", settings=three, progress=False)
    assert not (three.build_dir / "smoke").exists()


def test_run_entry_reports_failure_without_raising(tmp_path):
    make_notebook(tmp_path / "x.ipynb", HALF, ["x"])
    task = {"id": "x", "profile": "smoke", "notebook_name": "x.ipynb", "notebook_text": (tmp_path / "x.ipynb").read_text(),
            "outputs": ["x"], "parameters": {"dataset": "synthetic", "data_dir": None, "threads": None, "fail": True},
            "cell_timeout": 120}
    res = run_entry(task)
    assert res["status"] == "failed" and res["files"] == {} and "RuntimeError" in res["error"]
    assert "deliberate failure" in res["log"] and res["notebook"]


def test_missing_manual_dataset_fails_fast(tmp_path):
    m = make_manifest(tmp_path, [("alpha", GOOD, ["a"], {}), ("beta", GOOD, ["b"], {})])
    doc = json.loads(m.read_text())
    doc["entries"][0]["profiles"]["paper"] = {"dataset": "ml-1m", "parameters": {}}
    doc["entries"][1]["profiles"]["paper"] = {"dataset": "synthetic:n_users=10", "parameters": {}}
    m.write_text(json.dumps(doc))
    s = load_settings(figures_dir=tmp_path / "figures", build_dir=tmp_path / "build",
                      results_file=tmp_path / "figures" / "results.json", manifest=m, data_dir=tmp_path / "data")
    summary = reproduce(profile="paper", settings=s, progress=False)
    alpha, beta = summary.outcomes
    assert summary.exit_code == 1 and alpha.status == "failed" and beta.status == "ok"
    assert "ml-1m" in alpha.error and "placed by hand" in alpha.error and alpha.log.is_file()
    assert set(load_results(s.results_file)) == {"beta"}
    assert not (s.figures_dir / "testpaper" / "a.png").exists()


def test_stamp_follows_the_modules_a_run_imported(three):
    from dpmf_lit.records.provenance import is_up_to_date, source_hashes
    s = three
    assert reproduce(profile="smoke", settings=s, only="alpha", progress=False).outcomes[0].status == "ok"
    records = load_results(s.results_file)
    entry = [e for e in load_manifest(settings=s) if e.id == "alpha"][0]
    used = records["alpha"]["modules"]
    assert "dpmf_lit.records.experiment" in used and "dpmf_lit.studies.bench" not in used
    assert "dpmf_lit.batch.reproduce" not in used   # the runner can change without staling a figure
    hashes = source_hashes()
    assert is_up_to_date(entry, "smoke", s, records, hashes)
    assert is_up_to_date(entry, "smoke", s, records, {**hashes, "dpmf_lit.studies.bench": "changed"})      # not imported
    assert not is_up_to_date(entry, "smoke", s, records, {**hashes, "dpmf_lit.records.experiment": "changed"})  # imported
    from dpmf_lit.records.provenance import stale_reason
    assert stale_reason(entry, "smoke", s, records, {**hashes, "dpmf_lit.records.experiment": "x"}) == "stale: changed dpmf_lit.records.experiment"


# --- figures are checked, progress, timeouts, interrupts, Dask addresses, scratch folders ---------------

# writes files with the promised names that are not images (a 9-byte text as .png, an empty .svg)
FAKE = '''
from dpmf_lit.records.experiment import experiment_dir, record
out = experiment_dir(out_dir)
for name in NAMES:
    (out / f"{name}.png").write_text("not a png")
    (out / f"{name}.svg").write_text("")
'''


def test_files_that_are_not_images_fail_and_keep_the_old_figures(tmp_path):
    m = make_manifest(tmp_path, [("pic", GOOD, ["p"], {})])
    s = tmp_settings(tmp_path, m)
    assert reproduce(profile="smoke", settings=s, progress=False).exit_code == 0
    good = {f: (s.figures_dir / "testpaper" / f).read_bytes() for f in ("p.png", "p.svg")}
    records = load_results(s.results_file)
    make_notebook(m.parent / "pic.ipynb", FAKE, ["p"])
    bad = reproduce(profile="smoke", settings=s, progress=False).outcomes[0]
    assert bad.status == "failed" and "not images" in bad.error
    assert "p.png (not a PNG image" in bad.error and "p.svg (not an SVG image" in bad.error
    assert {f: (s.figures_dir / "testpaper" / f).read_bytes() for f in good} == good
    assert load_results(s.results_file) == records


@pytest.mark.slow
def test_progress_off_a_terminal_is_one_plain_line_per_entry(three, capsys):
    reproduce(profile="smoke", settings=three, only="alpha,beta", progress=True)
    err = capsys.readouterr().err
    assert "\r" not in err, "a progress bar was drawn into a stream that is not a terminal"
    assert "reproduce smoke: [1/2] alpha ok" in err and "reproduce smoke: [2/2] beta ok" in err
    reproduce(profile="smoke", settings=three, only="alpha", force=True, progress=False)
    assert capsys.readouterr().err == ""


SLEEPY = '''
import time, pathlib
pathlib.Path(marker).write_text("started")
time.sleep(120)
'''


def sleepy_manifest(tmp_path, n=1):
    m = make_manifest(tmp_path, [(f"sleepy{i}", SLEEPY, [f"z{i}"], {}) for i in range(n)])
    for i in range(n):  # each notebook announces that its long cell has started
        nb = nbformat.read(str(m.parent / f"sleepy{i}.ipynb"), as_version=4)
        nb.cells[1].source += f"\nmarker = {str(tmp_path / f'started{i}')!r}"
        nbformat.write(nb, str(m.parent / f"sleepy{i}.ipynb"))
    return m


def test_cell_timeout_fails_fast_in_one_line(tmp_path):
    import time
    from dpmf_lit.batch.reproduce import SMOKE_CELL_TIMEOUT, _task, cell_timeout
    m = sleepy_manifest(tmp_path)
    s = load_settings(figures_dir=tmp_path / "figures", build_dir=tmp_path / "build",
                      results_file=tmp_path / "figures" / "results.json", manifest=m, cell_timeout=3)
    t0 = time.perf_counter()
    summary = reproduce(profile="smoke", settings=s, progress=False)
    assert time.perf_counter() - t0 < 60
    o = summary.outcomes[0]
    assert o.status == "failed" and "\n" not in o.error and "cell_timeout=3 s" in o.error, o.error
    assert "sleepy0" in str(summary) and "timed out" in o.log.read_text()
    # the smoke profile caps the cell timeout; the others take settings' value
    big = load_settings(cell_timeout=1800, manifest=m)
    entry = load_manifest(settings=big)[0]
    assert cell_timeout("smoke", big) == SMOKE_CELL_TIMEOUT == 300 and _task(entry, "smoke", big)["cell_timeout"] == 300
    assert cell_timeout("quick", big) == 1800


@pytest.mark.parametrize("jobs", [1, 2])
def test_ctrl_c_exits_130_without_a_traceback(tmp_path, jobs):
    import signal, subprocess, time
    m = sleepy_manifest(tmp_path, n=jobs)
    env = {**os.environ, "DPMF_MANIFEST": str(m), "DPMF_FIGURES_DIR": str(tmp_path / "figures"),
           "DPMF_BUILD_DIR": str(tmp_path / "build"), "DPMF_RESULTS_FILE": str(tmp_path / "figures" / "results.json")}
    dpmf = Path(sys.executable).parent / "dpmf"
    p = subprocess.Popen([str(dpmf), "reproduce", "--profile", "smoke", "--jobs", str(jobs)], env=env, cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not all((tmp_path / f"started{i}").exists() for i in range(jobs)):
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.2)
    t0 = time.monotonic()
    os.killpg(p.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground process group
    out, err = p.communicate(timeout=60)
    err = err.decode()
    assert p.returncode == 130 and time.monotonic() - t0 < 30, (p.returncode, err)
    assert "Traceback" not in err and "ZMQError" not in err and "Task exception" not in err, err
    assert "interrupted" in err


def test_an_interrupted_entry_leaves_no_task_exception_for_asyncio_to_print(tmp_path, monkeypatch, caplog):
    """A Ctrl-C (a pool worker's SIGTERM) lands inside nbclient's event loop and leaves the cell's tasks pending;
    papermill's cleanup then runs that loop again to shut the kernel down. When the kernel watcher (a 1-s poll)
    saw the kernel gone before the cleanup ended, as on a loaded machine, the cell's task ended with a
    DeadKernelError nobody retrieved, and asyncio printed "Task exception was never retrieved" and a traceback
    on the terminal. A cleanup slowed down after the kernel has died makes that race certain here."""
    import asyncio, gc, logging, signal, threading, time
    from jupyter_client.manager import AsyncKernelManager
    from dpmf_lit.batch.reproduce import _task
    m = sleepy_manifest(tmp_path)
    s = tmp_settings(tmp_path, m)
    task = _task(load_manifest(settings=s)[0], "smoke", s)
    cleanup = AsyncKernelManager.cleanup_resources
    async def slow_cleanup(self, *a, **kw):  # runs after the kernel is shut down: its watcher wakes meanwhile
        await asyncio.sleep(2.5)
        return await cleanup(self, *a, **kw)
    monkeypatch.setattr(AsyncKernelManager, "cleanup_resources", slow_cleanup)

    def interrupt(signum, frame): raise KeyboardInterrupt
    def send():  # once the long cell runs, interrupt the main thread the way Ctrl-C would
        deadline = time.monotonic() + 120
        while not (tmp_path / "started0").exists() and time.monotonic() < deadline: time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGUSR1)
    old = signal.signal(signal.SIGUSR1, interrupt)
    caplog.set_level(logging.ERROR, logger="asyncio")
    try:
        threading.Thread(target=send, daemon=True).start()
        with pytest.raises(KeyboardInterrupt): run_entry(task)
    finally: signal.signal(signal.SIGUSR1, old)
    gc.collect()  # a finished task logs its unretrieved exception when it is collected
    printed = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert not printed, printed


def test_unreachable_dask_scheduler_fails_fast(three):
    import socket, time
    from dpmf_lit.core.checks import UserError
    with socket.socket() as sock:  # a port on which nothing listens
        sock.bind(("127.0.0.1", 0)); port = sock.getsockname()[1]
    t0 = time.perf_counter()
    with pytest.raises(UserError, match=f"Dask scheduler at 'tcp://127.0.0.1:{port}'"):
        reproduce(profile="smoke", settings=three, dask_address=f"tcp://127.0.0.1:{port}", progress=False)
    assert time.perf_counter() - t0 < 10
    with pytest.raises(ValueError, match="dask_address='tcp://host:notaport'"):
        reproduce(profile="smoke", settings=three, dask_address="tcp://host:notaport", progress=False)
    assert not (three.build_dir / "smoke").exists()


def test_scratch_folders_are_removed_when_the_process_ends(tmp_path):
    import subprocess, tempfile
    from dpmf_lit.records.experiment import experiment_dir
    code = "from dpmf_lit.records.experiment import experiment_dir; print(experiment_dir())"
    made = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert made and "dpmf-experiment-" in made and not Path(made).exists()
    # in a process-pool worker too, as nbdev-test runs notebooks (multiprocessing's exit hook; atexit does not run there)
    code = ("import multiprocessing as mp\nfrom concurrent.futures import ProcessPoolExecutor\n"
            "from dpmf_lit.records.experiment import experiment_dir\ndef f(_): return str(experiment_dir())\n"
            "if __name__ == '__main__':\n    with ProcessPoolExecutor(1, mp_context=mp.get_context('fork')) as p: print(list(p.map(f, [0]))[0])\n")
    (tmp_path / "pool.py").write_text(code)
    made = subprocess.run([sys.executable, str(tmp_path / "pool.py")], capture_output=True, text=True, check=True).stdout.strip()
    assert made and not Path(made).exists()
    # folders of processes that were killed are swept by the next call
    dead = subprocess.Popen([sys.executable, "-c", "pass"]); dead.wait()
    orphan = Path(tempfile.gettempdir()) / f"dpmf-experiment-{dead.pid}-test"
    orphan.mkdir()
    try:
        mine = experiment_dir()
        assert not orphan.exists() and mine.is_dir()
    finally: shutil.rmtree(orphan, ignore_errors=True)
