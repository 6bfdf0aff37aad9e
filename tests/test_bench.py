"""`dpmf bench` machinery: a small-mode run gives well-formed rows for every engine, the ratios
in the table are the quotients of the rows' rates, bad arguments are refused by name, and a
reference engine that hangs or fails becomes a failed row while the run goes on. No test asserts
a speed; the hang tests only check that a stuck engine is given up on."""
import ctypes, importlib.util, math, multiprocessing, time

import numpy as np
import pytest

from dpmf_lit.studies import bench, reference_engines
from dpmf_lit.core import machine
from dpmf_lit.studies.bench import ENGINES, bench_ratios, format_table, run_bench

REQUIRED = {"engine": str, "dataset": str, "d": int, "threads": int, "updates_per_s": float,
            "epochs": int, "n_ratings": int, "seconds": float, "compile_seconds": float}
PACKAGE = {"surprise-svd": "surprise", "libmf": "libmf"}


def _installed(engine):
    mod = PACKAGE.get(engine)
    return mod is None or importlib.util.find_spec(mod) is not None


@pytest.fixture(scope="module")
def quick_rows():
    return run_bench(quick=True, threads=(1, 2) if bench.numba.config.NUMBA_NUM_THREADS >= 2 else (1,), progress=False)


@pytest.mark.parametrize("engine", ENGINES)
def test_quick_run_gives_well_formed_rows(quick_rows, engine):
    if not _installed(engine):
        pytest.skip(f"{engine}: package {PACKAGE[engine]!r} is not installed (pip install 'dpmf-lit[bench]')")
    rows = [r for r in quick_rows if r["engine"] == engine]
    assert rows, f"no row for {engine}"
    data = bench.bench_dataset("quick")
    for r in rows:
        for key, kind in REQUIRED.items():
            assert isinstance(r[key], kind), (key, r[key])
        assert r["dataset"] == "quick" and r["d"] == 8 and r["epochs"] == 2
        assert r["n_ratings"] == len(data)
        assert math.isfinite(r["updates_per_s"]) and r["updates_per_s"] > 0
        assert r["seconds"] > 0 and r["compile_seconds"] >= 0
        # the engine produced finite predictions on the rating scale (no NaN, no divergence)
        assert math.isfinite(r["train_rmse_sample"]) and r["train_rmse_sample"] < data.rating_max - data.rating_min
    expected_threads = {1} if engine in ("dpmf-sgd", "surprise-svd") else {1, bench.numba.config.NUMBA_NUM_THREADS}
    assert {r["threads"] for r in rows} == expected_threads


def test_dpmf_rows_report_jit_and_traffic(quick_rows):
    for r in (r for r in quick_rows if r["engine"].startswith("dpmf")):
        # SGLD reads 2(d + 1) float32 noise numbers per update on top of SGD's traffic
        assert r["bytes_per_update"] == (24 * r["d"] + 20 if "sgld" in r["engine"] else 16 * r["d"] + 12)
        assert r["gb_per_s"] == pytest.approx(r["updates_per_s"] * r["bytes_per_update"] / 1e9)
        assert r["jit_cache"] in ("hit", "miss", "unknown")


def test_quick_run_keys_are_unique(quick_rows):
    keys = [(r["engine"], r["dataset"], r["d"], r["threads"]) for r in quick_rows]
    assert len(keys) == len(set(keys))


def _fake_rows():
    rows = []
    for d, scale in ((16, 2.0), (64, 1.0)):
        rows += [dict(engine="dpmf-sgd", dataset="toy", d=d, threads=1, updates_per_s=20e6 * scale),
                 dict(engine="dpmf-sgd-parallel", dataset="toy", d=d, threads=1, updates_per_s=18e6 * scale),
                 dict(engine="dpmf-sgd-parallel", dataset="toy", d=d, threads=2, updates_per_s=30e6 * scale),
                 dict(engine="surprise-svd", dataset="toy", d=d, threads=1, updates_per_s=1.6e6 * scale),
                 dict(engine="libmf", dataset="toy", d=d, threads=1, updates_per_s=8e6 * scale),
                 dict(engine="libmf", dataset="toy", d=d, threads=2, updates_per_s=12e6 * scale)]
    return rows


def test_ratios_are_quotients_of_row_rates():
    q = {x["d"]: x for x in bench_ratios(_fake_rows())}
    assert set(q) == {16, 64}
    for d in (16, 64):   # scale cancels: same ratios at both d
        assert q[d]["dpmf_vs_surprise"] == pytest.approx(20 / 1.6)        # best 1-thread dpmf is the serial one
        assert q[d]["dpmf_vs_libmf_1"] == pytest.approx(20 / 8)
        assert q[d]["dpmf_vs_libmf_all"] == pytest.approx(30 / 12)
        assert q[d]["speedup"] == pytest.approx(30 / 20)                   # strict: vs the best single-thread code
        assert q[d]["parallel_scaling"] == pytest.approx(30 / 18)
        assert q[d]["libmf_speedup"] == pytest.approx(12 / 8)
        assert q[d]["threads_all"] == 2


def test_ratios_missing_engine_is_none():
    rows = [r for r in _fake_rows() if r["engine"] != "libmf"]
    q = bench_ratios(rows)[0]
    assert q["dpmf_vs_libmf_1"] is None and q["dpmf_vs_libmf_all"] is None and q["dpmf_vs_surprise"] is not None


def test_format_table_shows_rows_ratios_and_targets():
    rows_part, ratio_part = format_table(_fake_rows()).split("\n\n")
    assert sum(1 for l in rows_part.splitlines() if l.startswith("toy")) == 12
    assert "40.00" in rows_part and "M upd/s" in rows_part               # 20e6 * 2 at d = 16, in millions
    ratio = {l.split()[1]: l for l in ratio_part.splitlines() if l.startswith("toy")}
    assert set(ratio) == {"16", "64"}
    assert "12.50 ok" in ratio["64"] and "2.50 ok" in ratio["64"] and "1.50 MISS" in ratio["64"]
    assert "12.50" in ratio["16"] and "ok" not in ratio["16"] and "MISS" not in ratio["16"]   # targets judged at d = 64


@pytest.mark.parametrize("kwargs, match", [
    (dict(ds=(0,)), "d=0"),
    (dict(engines=("dpmf-sgd", "spark")), "'spark'"),
    (dict(epochs=1), "epochs=1"),
    (dict(repeats=0), "repeats=0"),
    (dict(threads=(0,)), "threads=0"),
    (dict(datasets=("no-such-data",)), "'no-such-data'"),
    (dict(surprise_max_ratings=0), "surprise_max_ratings=0"),
])
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        run_bench(progress=False, **kwargs)


def test_cache_sizes_are_positive():
    for level, size in machine.cache_sizes().items():
        assert level.startswith("L") and size > 0


def test_bad_layout_is_named():
    with pytest.raises(ValueError, match="dpmf_layout='rows'"):
        run_bench(quick=True, progress=False, dpmf_layout="rows")


def test_layout_study_runs_the_package_kernels_in_four_orders():
    rows = bench.layout_study(bench.bench_dataset("quick"), d=8, repeats=1, grid=2)
    assert [r["layout"] for r in rows] == ["indirect shuffled", "contiguous shuffled", "user-grouped", "grid 2x2, user-grouped"]
    assert all(math.isfinite(r["updates_per_s"]) and r["updates_per_s"] > 0 and r["threads"] == 1 for r in rows)


def test_user_layout_rows_say_so():
    rows = run_bench(quick=True, engines=("dpmf-sgd-parallel",), threads=(1,), dpmf_layout="user", progress=False)
    assert len(rows) == 1 and "layout='user'" in rows[0]["layout"]


def test_rows_are_strict_json(quick_rows):
    import json
    again = json.loads(json.dumps(quick_rows, allow_nan=False))   # `dpmf bench --json` contract: no NaN/inf
    assert [r["engine"] for r in again] == [r["engine"] for r in quick_rows]


# --- reference engines run in a child process: a hang or a failure is a row, never a stuck run ---

FORK = "fork" in multiprocessing.get_all_start_methods()
needs_fork = pytest.mark.skipif(not FORK, reason="the replaced engine reaches the child only through fork")


def _fake_row(engine="libmf", threads=1):
    return dict(engine=engine, threads=threads, seconds=1.0, updates_per_s=1e6, compile_seconds=0.0, train_rmse_sample=1.0)


def _stuck(*args, **kwargs):
    ctypes.CDLL(None).sleep(3600)   # stuck in C, as LIBMF's deadlocked threads are: no Python signal gets in


@pytest.fixture
def any_engine(monkeypatch):
    "Every engine counts as installed, so these tests do not need Surprise or libmf."
    monkeypatch.setattr(bench, "_engine_available", lambda engine: None)


@needs_fork
def test_hanging_reference_engine_becomes_a_failed_row_and_the_run_goes_on(monkeypatch, any_engine):
    monkeypatch.setattr(reference_engines, "_bench_libmf", _stuck)
    t0 = time.perf_counter()
    with pytest.warns(UserWarning, match="libmf d=8 threads=1 failed: no result in 1 s on 2 tries"):
        rows = run_bench(quick=True, engines=("libmf", "dpmf-sgd"), threads=(1,), engine_timeout=1.0, progress=False)
    assert time.perf_counter() - t0 < 60
    lib, = [r for r in rows if r["engine"] == "libmf"]
    assert lib["updates_per_s"] is None and lib["attempts"] == 2 and "killed" in lib["error"]
    dp, = [r for r in rows if r["engine"] == "dpmf-sgd"]
    assert dp["updates_per_s"] > 0                                   # the next engine still ran
    table = format_table(rows)
    assert "FAILED: no result in 1 s" in table and bench_ratios(rows)[0]["dpmf_vs_libmf_1"] is None


@needs_fork
def test_a_hang_is_retried_once(monkeypatch, any_engine, tmp_path):
    flag = tmp_path / "hung-once"
    def hang_first_time(r, d, threads, epochs, repeats, **kw):
        if not flag.exists():
            flag.touch()
            _stuck()
        return _fake_row(threads=threads)
    monkeypatch.setattr(reference_engines, "_bench_libmf", hang_first_time)
    rows = run_bench(quick=True, engines=("libmf",), threads=(1,), engine_timeout=2.0, progress=False)
    assert len(rows) == 1 and rows[0]["attempts"] == 2 and rows[0]["updates_per_s"] == 1e6
    assert "hung 1x" in rows[0]["note"] and "error" not in rows[0]


@needs_fork
def test_reference_engine_error_becomes_a_failed_row(monkeypatch, any_engine):
    def boom(*args, **kwargs): raise RuntimeError("boom")
    monkeypatch.setattr(reference_engines, "_bench_surprise", boom)
    with pytest.warns(UserWarning, match="RuntimeError: boom"):
        rows = run_bench(quick=True, engines=("surprise-svd",), threads=(1,), progress=False)
    assert rows[0]["error"] == "RuntimeError: boom" and rows[0]["attempts"] == 1 and rows[0]["updates_per_s"] is None


def test_reference_row_time_limit_grows_with_the_work():
    small = reference_engines._row_timeout("libmf", 20_000, 8, 2, 1, 1_000_000)
    large = reference_engines._row_timeout("libmf", 20_000_000, 64, 3, 2, 1_000_000)
    assert 30 <= small < 31 and large > 10 * small
    assert reference_engines._row_timeout("surprise-svd", 20_000_000, 64, 3, 2, 1_000_000) < large   # Surprise runs on a subsample


@pytest.mark.parametrize("kwargs, match", [(dict(engine_timeout=0), "engine_timeout=0"),
                                           (dict(engine_timeout=float("nan")), "engine_timeout=nan"),
                                           (dict(seed=-1), "seed=-1")])
def test_bad_timeout_and_seed_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        run_bench(quick=True, progress=False, **kwargs)


def test_rows_carry_setup_and_whole_fit_seconds(quick_rows):
    for r in quick_rows:
        if r["engine"] in ("dpmf-sgd-parallel", "libmf") and not r.get("error"):
            assert r["fit_s"] > 0 and r["fit_s"] >= r["seconds"] * 0.99
        if r["engine"] == "dpmf-sgd-parallel":   # whole fit = setup + the timed epochs + predicting every rating
            assert r["fit_s"] == pytest.approx(r["setup_s"] + r["seconds"] + r["eval_s"])
            assert r["setup_epochs"] == pytest.approx(r["setup_s"] / (r["seconds"] / r["epochs"]))


def test_surprise_and_dpmf_are_timed_on_the_same_subsample():
    rows = run_bench(quick=True, progress=False, surprise_max_ratings=5_000, engines=("dpmf-sgd", "surprise-svd", "libmf"))
    full = [r for r in rows if r["dataset"] == "quick"]
    sub = [r for r in rows if r["dataset"] != "quick"]
    assert {r["engine"] for r in full} == {"dpmf-sgd", "libmf"}            # Surprise never on the full set
    assert {r["engine"] for r in sub} == {"dpmf-sgd", "surprise-svd"} and {r["n_ratings"] for r in sub} == {5_000}
    assert all("the same for every engine" in r["subsample"] for r in sub)
    q = {x["dataset"]: x for x in bench_ratios(rows)}
    assert q["quick"]["dpmf_vs_surprise"] is None and q[sub[0]["dataset"]]["dpmf_vs_surprise"] > 0


def test_setup_and_whole_fit_ratios():
    rows = _fake_rows()
    for r in rows:
        if r["engine"] == "dpmf-sgd-parallel": r.update(setup_epochs=1.5 if r["threads"] == 2 else 9.0, fit_s=10.0 * r["threads"])
        if r["engine"] == "libmf": r.update(fit_s=50.0)
    q = {x["d"]: x for x in bench_ratios(rows)}
    assert q[64]["setup_epochs"] == 1.5 and q[64]["fit_vs_libmf"] == pytest.approx(20 / 50)   # at the most threads
    ratio = [l for l in format_table(rows).split("\n\n")[1].splitlines() if l.startswith("toy") and l.split()[1] == "64"][0]
    assert "1.50 ok" in ratio and "0.40 ok" in ratio
