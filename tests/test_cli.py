"""The `dpmf` console script: its machine-readable contract, its help, and its errors (run as a subprocess)."""
import json, os, subprocess, sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent / "dpmf"
SMALL = "synthetic:n_users=300,n_items=200,n_ratings=10000"


def dpmf(*args, cwd=None, env=None):
    "Run the installed console script (or `dpmf_lit.cli.main.main` in a fresh interpreter without one)."
    cmd = [str(BIN)] if BIN.exists() else [sys.executable, "-c", "import sys; from dpmf_lit.cli.main import main; sys.exit(main())"]
    return subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True, timeout=600, cwd=cwd,
                          env={**os.environ, "MPLBACKEND": "Agg", **(env or {})})


def test_fit_json_contract():
    p = dpmf("fit", "pmf", "--dataset", SMALL, "--set", "d=4", "--set", "epochs=5", "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)                       # exactly one JSON object on stdout
    assert isinstance(rep, dict)
    assert {"rmse", "mae", "fit_seconds", "n_train", "n_test", "privacy"} <= set(rep)
    assert {"released", "unit", "epsilon", "delta", "method"} <= set(rep["privacy"])
    assert rep["n_train"] + rep["n_test"] == 10_000 and rep["n_test"] == 2_000
    assert 0 < rep["mae"] <= rep["rmse"] < 4 and rep["fit_seconds"] >= 0
    assert rep["privacy"]["epsilon"] is None and rep["parameters"]["d"] == 4


@pytest.mark.slow
def test_fit_is_deterministic_and_seeded():
    args = ("fit", "pmf", "--dataset", SMALL, "--set", "d=4", "--set", "epochs=5", "--set", "threads=1", "--json")
    a, b = json.loads(dpmf(*args).stdout), json.loads(dpmf(*args).stdout)
    c = json.loads(dpmf(*args, "--seed", "1").stdout)
    assert a["rmse"] == b["rmse"] and a["mae"] == b["mae"]
    assert c["rmse"] != a["rmse"] and c["seed"] == 1


def test_fit_human_output():
    p = dpmf("fit", "pmf", "--dataset", SMALL, "--set", "epochs=3")
    assert p.returncode == 0, p.stderr
    assert "test RMSE" in p.stdout and "non-private" in p.stdout


@pytest.mark.parametrize("cmd", [(), ("data",), ("data", "fetch"), ("data", "list"), ("fit",), ("bench",), ("reproduce",)])
def test_help(cmd):
    p = dpmf(*cmd, "--help")
    assert p.returncode == 0 and p.stdout.startswith("usage: dpmf"), p.stderr
    assert len(p.stdout.splitlines()) > 5


def test_help_explains_reproduce_options():
    out = dpmf("reproduce", "--help").stdout
    for flag in ("--profile", "--only", "--force", "--jobs", "--dask", "--data-dir", "--figures-dir", "--build-dir"):
        assert flag in out


@pytest.mark.parametrize("args, message", [
    (("fit", "nosuchmech", "--dataset", SMALL), "nosuchmech"),
    (("fit", "pmf", "--dataset", SMALL, "--set", "d32"), "'d32' is not of the form key=value"),
    (("fit", "pmf", "--dataset", SMALL, "--set", "colour=red"), "no parameter 'colour'"),
    (("fit", "pmf", "--dataset", "ml-7"), "dataset='ml-7' is unknown"),
    (("fit", "pmf", "--dataset", "synthetic:n_users"), "option 'n_users' is not of the form key=value"),
    (("fit", "pmf", "--dataset", "synthetic:nusers=10"), "unknown synthetic option(s) ['nusers']"),
    (("fit", "pmf", "--dataset", SMALL, "--test-fraction", "1.5"), "test_fraction=1.5"),
    (("fit", "pmf", "--dataset", SMALL, "--set", "d=-3"), "d=-3"),
    (("fit", "pmf"), "--dataset"),
    (("data", "fetch", "ml-7"), "dataset='ml-7'"),
    (("data", "fetch", "synthetic"), "nothing to fetch"),
    (("reproduce", "--profile", "huge"), "invalid choice"),
    (("reproduce", "--only", "nosuch*"), "matches no entry"),
    (("reproduce", "--jobs", "0"), "jobs=0"),
    (("nosuchcommand",), "invalid choice"),
])
def test_bad_input(args, message, tmp_path):
    p = dpmf(*args, "--figures-dir", tmp_path / "f", "--build-dir", tmp_path / "b")
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert p.stderr.strip().splitlines()[-1].startswith("dpmf: error:"), p.stderr
    assert message in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "f").exists() and not (tmp_path / "b").exists()


def test_data_list(tmp_path):
    p = dpmf("--data-dir", tmp_path, "data", "list", "--json")
    rows = json.loads(p.stdout)
    names = [r["name"] for r in rows]
    assert "ml-100k" in names and "synthetic" in names
    ml = rows[names.index("ml-100k")]
    assert ml["cached"] is False and ml["auto_fetch"] is True and str(tmp_path) in ml["path"]
    assert "ml-100k" in dpmf("data", "list").stdout


def test_global_options_after_the_subcommand(tmp_path):
    rows = json.loads(dpmf("data", "list", "--json", "--data-dir", tmp_path).stdout)
    assert str(tmp_path) in rows[0]["path"]


def test_missing_manual_dataset_says_where_to_get_it(tmp_path):
    p = dpmf("--data-dir", tmp_path, "data", "fetch", "ml-1m")
    assert p.returncode == 2 and p.stderr.startswith("dpmf: error:") and "ml-1m" in p.stderr and "Traceback" not in p.stderr


def test_reproduce_smoke_via_cli(tmp_path):
    args = ("--figures-dir", tmp_path / "figures", "--build-dir", tmp_path / "build")
    p = dpmf("reproduce", "--profile", "smoke", "--only", "baseline-pmf-error-cdf", "--no-progress", *args)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 ok" in p.stdout
    assert (tmp_path / "figures" / "baseline" / "pmf_error_cdf.png").is_file()
    assert (tmp_path / "figures" / "baseline" / "pmf_error_cdf.svg").is_file()
    rec = json.loads((tmp_path / "figures" / "results.json").read_text())
    assert [r["id"] for r in rec] == ["baseline-pmf-error-cdf"]
    again = dpmf("reproduce", "--profile", "smoke", "--only", "baseline-pmf-error-cdf", "--no-progress", *args)
    assert again.returncode == 0 and "1 skipped" in again.stdout


def test_bench_json_contract():
    from dpmf_lit.studies import bench  # noqa: F401  (skip cleanly if the bench module is absent)
    p = dpmf("bench", "--quick", "--engines", "dpmf-sgd", "--threads", "1", "--json")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    assert isinstance(rows, list) and rows
    for r in rows:
        assert {"engine", "dataset", "d", "threads", "updates_per_s"} <= set(r)
        assert r["engine"] == "dpmf-sgd" and r["threads"] == 1 and r["updates_per_s"] > 0


def test_reproduce_failure_exit_status(tmp_path):
    "A failing entry: exit status 1, the summary names it and its log, stderr says so."
    import nbformat
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('dataset = "synthetic"\nout_dir = None\ndata_dir = None\nthreads = None')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell("raise ValueError('deliberately broken experiment')")]
    nbformat.write(nb, str(tmp_path / "broken.ipynb"))
    (tmp_path / "manifest.json").write_text(json.dumps({"entries": [
        {"id": "broken", "paper": "p", "notebook": "broken.ipynb", "outputs": ["x"],
         "profiles": {"smoke": {"dataset": "synthetic", "parameters": {}}}}]}))
    p = dpmf("reproduce", "--profile", "smoke", "--no-progress", "--figures-dir", tmp_path / "f", "--build-dir", tmp_path / "b",
             env={"DPMF_MANIFEST": str(tmp_path / "manifest.json")})
    assert p.returncode == 1, p.stdout + p.stderr
    assert "FAILED" in p.stdout and "deliberately broken experiment" in p.stdout and str(tmp_path / "b" / "smoke" / "broken.failed.log") in p.stdout
    assert "1 entry failed: broken" in p.stderr
    assert not (tmp_path / "f" / "p").exists() and not (tmp_path / "f" / "results.json").exists()


# ---------------------------------------------------------------- user errors are one line, exit 2; bugs are one line, exit 1
@pytest.mark.parametrize("mech, sets, message", [
    ("pmf", ["lr=abc"], "lr='abc' must be a number > 0"),
    ("pmf", ["reg_bias=abc"], "reg_bias='abc' must be a number"),
    ("pmf", ["init_std=abc"], "init_std='abc' must be a number > 0"),
    ("pmf", ["lr_decay=abc"], "lr_decay='abc' must be a number"),
    ("pmf", ["bias=no"], "bias='no' must be True or False"),
    ("pmf", ["lr=0.5", "d=8"], "); lower lr=0.5"),                     # a step that diverges on SMALL
    ("pmf", ["d=100000000000"], "more than the"),
    ("hua", ["epsilon=true"], "epsilon=True must be a number > 0"),
    ("hua", ["pmf_reg=-1"], "pmf_reg=-1 must be a finite number >= 0"),
    ("hua", ["pmf_lr=abc"], "pmf_lr='abc' must be a number > 0"),
    ("hua", ["pmf_solver=newton"], "pmf_solver='newton' must be one of"),
    ("hua", ["epsilon=1e-300"], "overflowed"),
    ("hua", ["epsilon=1e-320"], "raise epsilon=1e-320"),
])
def test_bad_parameter_values_are_one_line_errors(mech, sets, message):
    p = dpmf("fit", mech, "--dataset", SMALL, *[a for s in sets for a in ("--set", s)], "--json")
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert p.stderr.startswith("dpmf: error:") and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert message in p.stderr and "Traceback" not in p.stderr and "np." not in p.stderr and p.stdout == ""


def test_report_shows_the_parameters_that_ran():
    rep = json.loads(dpmf("fit", "pmf", "--dataset", SMALL, "--set", "d=4", "--set", "epochs=2", "--set", "threads=64", "--json").stdout)
    p = rep["parameters"]
    assert None not in (p["epochs"], p["lr"], p["lr_decay"], p["reg_bias"], p["threads"])
    assert p["threads"] <= (os.cpu_count() or 1) and p["blocks"] == 64


def test_human_output_states_the_privacy_scope():
    p = dpmf("fit", "hua", "--dataset", SMALL, "--set", "d=4")
    assert p.returncode == 0, p.stderr
    text = " ".join(p.stdout.split("privacy: ", 1)[1].split())
    assert text.startswith("given U, trained without noise on the same ratings and kept private: (1, 0)-DP per rating"), text
    assert "released V scope: for V given U" in text.replace(";", ""), text
    rep = json.loads(dpmf("fit", "hua", "--dataset", SMALL, "--set", "d=4", "--json").stdout)
    assert "(1, 0)-DP per rating (one rating's value changed)" in rep["privacy"]["summary"]
    assert "scope: for V given U, where U is trained non-privately" in rep["privacy"]["summary"]
    assert "not epsilon-DP" in rep["privacy"]["summary"]
    wide = dpmf("fit", "hua", "--dataset", SMALL, "--set", "d=4", env={"COLUMNS": "200"}).stdout
    assert "for V given U, where U is trained non-privately on the same ratings" in wide   # a wide terminal shows more of it


def test_fit_help_lists_every_mechanism_and_its_parameters():
    from dpmf_lit.model.mechanism import mechanisms
    out = dpmf("fit", "--help").stdout
    for name, cls in mechanisms().items():
        assert f"\n  {name}: " in out, name
        for k, default, doc in cls.parameter_docs():
            assert f"      {k}=" in out and doc in out, (name, k)
    assert "pmf_reg=0.1" in out and "solver=sgd" in out and "threads=none" in out


def test_help_says_how_paths_are_resolved():
    out = dpmf("--help").stdout
    flat = " ".join(out.split())
    assert "relative to the current folder" in flat and "inside settings.ini is relative to the folder of that file" in flat
    assert "--debug" in out


def test_internal_error_is_one_line_with_a_debug_hint(monkeypatch, capsys):
    from dpmf_lit.cli import main as cli
    def broken(args): raise KeyError("deliberate")
    monkeypatch.setattr(cli, "cmd_data_list", broken)
    assert cli.main(["data", "list"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines()[0] == "dpmf: internal error: KeyError: 'deliberate'" and "--debug" in err and "Traceback" not in err
    assert cli.main(["data", "list", "--debug"]) == 1
    assert "Traceback" in capsys.readouterr().err


@pytest.mark.parametrize("exc", [OSError("could not fetch ml-100k; every source failed"), MemoryError(),
                                 OverflowError("int too large to convert")])
def test_environment_errors_are_user_errors(exc, monkeypatch, capsys):
    from dpmf_lit.cli import main as cli
    from dpmf_lit import data
    def fail(*a, **k): raise exc
    monkeypatch.setattr(data, "fetch_dataset", fail)
    assert cli.main(["data", "fetch", "ml-100k"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dpmf: error:") and "Traceback" not in err


def test_user_error_is_exit_2(monkeypatch, capsys):
    from dpmf_lit.cli import main as cli
    from dpmf_lit import data
    from dpmf_lit.core.checks import UserError
    def fail(*a, **k): raise UserError("no network: download ml-100k by hand into data/ml-100k")
    monkeypatch.setattr(data, "fetch_dataset", fail)
    assert cli.main(["data", "fetch", "ml-100k"]) == 2
    assert capsys.readouterr().err == "dpmf: error: no network: download ml-100k by hand into data/ml-100k\n"


def test_bench_rank_option_is_not_mistaken_for_a_global_abbreviation(capsys):
    "`--d` (the bench's ranks) once failed as an ambiguous prefix of the global --data-dir/--debug."
    from dpmf_lit.cli.main import build_parser
    args = build_parser().parse_args(["bench", "--quick", "--d", "8", "16"])
    assert args.ds == [8, 16]


# ---------------------------------------------------------------- a newcomer's paths: own data, one mechanism's help, short reports
ROOT = Path(__file__).resolve().parents[1]


def _own_csv(path, duplicate=True):
    "A MovieLens-20M-style ratings file of 30 users x 20 items, with one repeated (user, item) pair at the end."
    rows = "".join(f"{u},{i},{(u * i) % 5 + 1},0\n" for u in range(30) for i in range(20))
    path.write_text("userId,movieId,rating,timestamp\n" + rows + ("3,4,5,0\n" if duplicate else ""))
    return path


def test_fit_on_a_ratings_file_of_ones_own(tmp_path):
    mine = _own_csv(tmp_path / "mine.csv")
    p = dpmf("fit", "pmf", "--dataset", mine, "--json")
    assert p.returncode == 2 and p.stdout == "" and "dpmf fit --on-duplicate first" in p.stderr, p.stderr
    assert "--set" not in p.stderr                        # the hint names an option the command line accepts
    p = dpmf("fit", "pmf", "--dataset", "mine.csv", "--on-duplicate", "last", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["dataset"] == "mine.csv" and rep["n_train"] + rep["n_test"] == 600
    (tmp_path / "r3.txt").write_text("".join(f"{u}\t{i}\t{(u + i) % 5 + 1}\n" for u in range(20) for i in range(10)))
    p = dpmf("fit", "pmf", "--dataset", tmp_path / "r3.txt", "--json")
    assert p.returncode == 2 and "--format" in p.stderr and "yahoo-r3" in p.stderr, p.stderr
    p = dpmf("fit", "pmf", "--dataset", tmp_path / "r3.txt", "--format", "yahoo-r3", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["n_test"] == 40, p.stderr


def test_bad_file_arguments_are_named(tmp_path):
    (tmp_path / "folder.csv").mkdir()
    (tmp_path / "afile").write_text("x")
    for args, message in [(("fit", "pmf", "--dataset", tmp_path / "folder.csv"), "is a folder, not a ratings file"),
                          (("fit", "pmf", "--dataset", tmp_path / "nothere.csv"), "nothere.csv': no such file"),
                          (("fit", "pmf", "--dataset", SMALL, "--on-duplicate", "first"), "not for the generated dataset"),
                          (("fit", "pmf", "--dataset", "ml-100k", "--format", "movielens-csv"), "is for a ratings file"),
                          (("fit", "pmf", "--dataset", SMALL, "--format", "csv"), "argument --format: invalid choice"),
                          (("fit", "pmf", "--dataset", SMALL, "--on-duplicate", "mean"), "argument --on-duplicate"),
                          (("fit", "nosuchmech", "--help"), "mechanism='nosuchmech' is not registered"),
                          (("--settings", tmp_path, "data", "list"), "--settings"),
                          (("--data-dir", tmp_path / "afile", "data", "list"), "--data-dir"),
                          (("--figures-dir", tmp_path / "afile", "fit", "pmf", "--dataset", SMALL), "is a file, not a folder")]:
        p = dpmf(*args)
        assert p.returncode == 2 and p.stderr.strip().splitlines()[-1].startswith("dpmf: error:"), (args, p.stderr)
        assert message in p.stderr and "Traceback" not in p.stderr and "Errno" not in p.stderr, (args, p.stderr)


def test_one_mechanisms_help_lists_its_parameters_alone():
    from dpmf_lit.model.mechanism import mechanisms
    found = mechanisms()
    whole = dpmf("fit", "--help").stdout
    assert "dpmf fit NAME --help" in whole
    for name, cls in found.items():
        p = dpmf("fit", name, "--help")
        assert p.returncode == 0 and p.stdout.startswith(f"usage: dpmf fit {name}"), p.stderr
        assert len(p.stdout.splitlines()) < len(whole.splitlines()) / 4, name
        for k, default, doc in cls.parameter_docs():
            assert f"\n  {k}=" in p.stdout and doc in p.stdout, (name, k)
        others = [o for o in found if o != name and f"\n{o}: " in "\n" + p.stdout]
        assert not others, (name, others)


@pytest.mark.parametrize("mech", ["gauss", "hua", "sgld", "xin"])
def test_printed_report_fits_the_screen(mech):
    "A line of test error, then the privacy headline whole (its condition first) and one line of scope, then any notes, each within 80 columns."
    p = dpmf("fit", mech, "--dataset", SMALL, env={"COLUMNS": "80"})
    assert p.returncode == 0, p.stderr
    assert max(map(len, p.stdout.splitlines())) <= 80, p.stdout
    lines = p.stdout.split("\nnote: ")[0].splitlines()   # sgld's default lr is capped: its note follows the scope
    assert 3 <= len(lines) <= 6, p.stdout
    assert "test RMSE" in lines[0] and lines[1].startswith("privacy: ") and lines[-1].startswith("  scope: ")
    rep = json.loads(dpmf("fit", mech, "--dataset", SMALL, "--json").stdout)
    assert rep["privacy"]["summary"] and rep["parameters"]


def test_json_run_shows_progress_on_a_terminal(monkeypatch, capsys):
    from dpmf_lit.cli import main as cli
    seen = {}
    def spy(*a, **k):
        seen.update(k)
        return {"mechanism": "pmf"}
    monkeypatch.setattr(cli, "fit_report", spy)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert cli.main(["fit", "pmf", "--dataset", SMALL, "--json"]) == 0
    assert seen["progress"] is True and json.loads(capsys.readouterr().out) == {"mechanism": "pmf"}


def test_compile_time_is_reported_apart(tmp_path):
    rep = json.loads(dpmf("fit", "pmf", "--dataset", SMALL, "--json").stdout)
    assert 0 <= rep["compile_seconds"] <= rep["fit_seconds"]
    from numba import njit
    from dpmf_lit.cli.main import numba_compile_seconds
    @njit
    def twice(x): return 2 * x
    with numba_compile_seconds() as first: twice(1.5)
    with numba_compile_seconds() as again: twice(2.5)
    assert first() > 0 and again() == 0


def test_every_numba_kernel_is_cached_on_disk():
    "A kernel compiled anew in every process would put seconds of compilation into each first fit."
    import importlib, pkgutil, dpmf_lit
    from numba.core.caching import NullCache
    from numba.core.registry import CPUDispatcher
    seen = 0
    for m in pkgutil.walk_packages(dpmf_lit.__path__, "dpmf_lit."):   # every layer folder
        mod = importlib.import_module(m.name)
        for name, obj in vars(mod).items():
            if isinstance(obj, CPUDispatcher) and obj.__module__ == mod.__name__ and obj.targetoptions.get("inline", "never") != "always":
                seen += 1
                assert not isinstance(obj._cache, NullCache), f"{mod.__name__}.{name} lacks cache=True"
    assert seen > 20


def _settings_with(tmp_path, extra: str) -> Path:
    ini = tmp_path / "settings.ini"
    ini.write_text((ROOT / "settings.ini").read_text() + extra)
    return ini


def test_data_list_columns_stay_aligned_with_long_names(tmp_path):
    ini = _settings_with(tmp_path, "\n[dataset:my-own-ratings-with-a-long-name]\nfiles = r.csv\nformat = movielens-csv\n"
                                   "n_ratings = 3\nlicense = mine\nauto = no\n")
    p = dpmf("--settings", ini, "--data-dir", tmp_path / "d", "data", "list")
    assert p.returncode == 0, p.stderr
    header, *rows = p.stdout.splitlines()
    for col in ("cached", "fetch", "checksum", "source"):
        at = header.index(col)
        assert all(r[at - 1] == " " and r[at] != " " for r in rows), (col, p.stdout)
    ml1m = next(r for r in rows if r.startswith("ml-1m "))
    assert ml1m.split()[5] == "none" and next(r for r in rows if r.startswith("ml-100k ")).split()[5] == "sha256"


def test_fetch_says_what_it_could_verify(tmp_path):
    "A data set whose settings.ini section has no checksum is not called verified."
    ini = _settings_with(tmp_path, "\n[dataset:mine]\nfiles = r.csv\nformat = movielens-csv\nn_ratings = 600\n"
                                   "license = mine\nauto = no\n")
    (tmp_path / "d" / "mine").mkdir(parents=True)
    _own_csv(tmp_path / "d" / "mine" / "r.csv", duplicate=False)
    p = dpmf("--settings", ini, "--data-dir", tmp_path / "d", "data", "fetch", "mine")
    assert p.returncode == 0, p.stderr
    assert "count verified, no checksum in settings.ini" in p.stdout and ", verified," not in p.stdout


def test_a_folder_where_a_data_file_belongs(tmp_path):
    (tmp_path / "ml-1m" / "ml-1m" / "ratings.dat").mkdir(parents=True)
    (tmp_path / "ml-100k" / "ratings.tsv").mkdir(parents=True)
    rows = {r["name"]: r for r in json.loads(dpmf("--data-dir", tmp_path, "data", "list", "--json").stdout)}
    assert rows["ml-1m"]["cached"] is False and rows["ml-100k"]["cached"] is False
    for name in ("ml-1m", "ml-100k"):
        p = dpmf("--data-dir", tmp_path, "data", "fetch", name)
        assert p.returncode == 2 and "is a folder" in p.stderr and "Errno" not in p.stderr, p.stderr
        assert "trying" not in p.stderr                      # refused before any download


def test_python_m_runs_the_command():
    p = subprocess.run([sys.executable, "-m", "dpmf_lit.cli.main", "fit", "pmf", "--help"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.startswith("usage: dpmf fit pmf"), p.stderr


def _subcommand_helps():
    "Every parser of `dpmf` (the top one and each subcommand's, nested ones too) with its help text."
    import argparse
    from dpmf_lit.cli.main import build_parser
    todo, out = [("dpmf", build_parser())], []
    while todo:
        name, p = todo.pop()
        out.append((name, p.format_help()))
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction): todo += [(f"{name} {k}", sub) for k, sub in a.choices.items()]
    return out


def test_help_texts_print_percent_signs_once():
    "argparse formats `%` in an option's help but not in a description: '95%%' there is printed as written."
    helps = _subcommand_helps()
    assert {"dpmf audit", "dpmf compare", "dpmf fit"} <= {n for n, _ in helps}
    doubled = [n for n, text in helps if "%%" in text]
    assert not doubled, f"'%%' printed in the help of {doubled}"
    assert "30% of the runs" in dict(helps)["dpmf audit"]


def test_a_closed_pipe_ends_quietly():
    "`dpmf ... | head`: the reader goes away before dpmf writes; no error line, no traceback, the shell's status for SIGPIPE."
    cmd = [str(BIN)] if BIN.exists() else [sys.executable, "-m", "dpmf_lit.cli.main"]
    p = subprocess.Popen(cmd + ["fit", "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()                       # the reader is gone before the interpreter has even started
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141 and err == "", err


@pytest.mark.parametrize("args", [("compare",), ("reproduce", "--only", "compare", "--force")])
def test_an_output_folder_that_cannot_be_written_is_refused_before_any_work(args, tmp_path):
    "`--figures-dir /proc/x`: refused in seconds, before the batch runs its entries (it used to run the comparison first)."
    cmd = [str(BIN)] if BIN.exists() else [sys.executable, "-m", "dpmf_lit.cli.main"]
    p = subprocess.run(cmd + [*args, "--figures-dir", "/proc/x", "--build-dir", str(tmp_path), "--no-progress"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stdout == "", p.stderr
    assert p.stderr.strip() == "dpmf: error: the figures folder (figures_dir, --figures-dir) '/proc/x' cannot be written: No such file or directory"

# ---------------------------------------------------------------- a plain user,item,rating[,timestamp] file of one's own

def _plain_csv(path, header="user,item,rating,timestamp", n_users=30, n_items=20):
    "30 users x 20 items with string user ids and half-star ratings 1..5, in the plainest CSV there is."
    rows = "".join(f"u{u},{i},{((u * i) % 9) / 2 + 1:g},97800{u}\n" for u in range(n_users) for i in range(n_items))
    path.write_text(("" if header is None else header + "\n") + rows)
    return path


def test_fit_on_a_plain_csv_end_to_end(tmp_path):
    mine = _plain_csv(tmp_path / "my_ratings.csv")
    p = dpmf("fit", "pmf", "--dataset", mine, "--set", "epochs=1", "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["n_train"] + rep["n_test"] == 600 and rep["dataset"] == str(mine)
    assert f"{mine}: rating scale [1, 5] read from the data" in p.stderr and "--scale LO,HI" in p.stderr, p.stderr
    p = dpmf("fit", "dp-bias", "--dataset", mine, "--scale", "1,5", "--set", "epsilon=1", "--json")
    assert p.returncode == 0 and "read from the data" not in p.stderr, p.stderr
    assert "rating scale" not in json.loads(p.stdout)["privacy"]["scope"]
    p = dpmf("fit", "dp-bias", "--dataset", mine, "--set", "epsilon=1", "--json")
    assert p.returncode == 0 and "the rating scale [1, 5] was read from the data" in json.loads(p.stdout)["privacy"]["scope"]
    other = tmp_path / "other.tsv"
    other.write_text("movie\tstars\tperson\n" + "".join(f"{i}\t{(u + i) % 5 + 1}\tp{u}\n" for u in range(20) for i in range(10)))
    for cols in ("person,movie,stars", "2,0,1"):
        p = dpmf("fit", "pmf", "--dataset", other, "--columns", cols, "--scale", "1,5", "--set", "epochs=1", "--json")
        assert p.returncode == 0 and json.loads(p.stdout)["n_test"] == 40, p.stderr


def test_what_the_cli_loads_is_load_dataset(tmp_path, monkeypatch, capsys):
    "`dpmf fit` reads a file through `load_dataset`: the ratings it splits are the ones `load_dataset` returns for the same options."
    from dpmf_lit import data
    from dpmf_lit.cli.main import main
    mine = tmp_path / "mine.txt"
    mine.write_text("rating,who,what,when\n" + "".join(f"{(u * i) % 5 + 1},u{u},{i},0\n" for u in range(30) for i in range(20)))
    seen, split = [], data.random_split
    monkeypatch.setattr(data, "random_split", lambda r, *a, **k: seen.append(r) or split(r, *a, **k))
    argv = ["fit", "pmf", "--dataset", str(mine), "--columns", "who,what,rating", "--scale", "0.5,5", "--set", "epochs=1"]
    assert main(argv) == 0 and "test RMSE" in capsys.readouterr().out
    want = data.load_dataset(str(mine), columns="who,what,rating", scale=(0.5, 5))
    (got,) = seen
    assert got.name == want.name and got.scale_source == want.scale_source == "declared"
    for a in ("user", "item", "rating", "user_ids", "item_ids"):
        assert (getattr(got, a) == getattr(want, a)).all(), a
    assert (got.n_users, got.n_items, got.rating_min, got.rating_max) == (want.n_users, want.n_items, 0.5, 5)


@pytest.mark.parametrize("extra, message", [
    (("--columns", "uid,iid,r"), "columns='uid,iid,r': no column 'uid' in the header of {f} (its columns: user, item, rating, timestamp)"),
    (("--columns", "0,1"), "columns='0,1': name 3 or 4 columns"),
    (("--columns", "0,1,9"), "columns='0,1,9': {f} has 4 fields per line"),
    (("--scale", "5,1"), "scale='5,1': LO must be below HI"),
    (("--scale", "one,five"), "scale='one,five': two numbers LO,HI"),
    (("--scale", "1,4"), "{f}: line 29: rating=4.5 is outside the scale [1, 4]"),
    (("--delimiter", "|"), "delimiter='|' must be one of"),
])
def test_bad_columns_and_scale_are_usage_errors(tmp_path, extra, message):
    mine = _plain_csv(tmp_path / "mine.csv")
    p = dpmf("fit", "pmf", "--dataset", mine, *extra, "--figures-dir", tmp_path / "f", "--build-dir", tmp_path / "b")
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stdout, p.stderr)
    assert p.stderr.strip().splitlines()[-1].startswith("dpmf: error:") and "Traceback" not in p.stderr, p.stderr
    assert message.format(f=mine) in p.stderr, p.stderr
    assert not (tmp_path / "f").exists() and not (tmp_path / "b").exists()


def test_scale_and_columns_are_for_a_file(tmp_path):
    for args, message in [(("--dataset", SMALL, "--scale", "1,5"), "not for the generated dataset"),
                          (("--dataset", "ml-100k", "--columns", "0,1,2"), "dataset 'ml-100k' takes options"),
                          (("--dataset", _plain_csv(tmp_path / "a.csv"), "--format", "movielens-csv", "--scale", "1,5"),
                           "format 'movielens-csv' takes options")]:
        p = dpmf("fit", "pmf", *args)
        assert p.returncode == 2 and message in p.stderr and "Traceback" not in p.stderr, (args, p.stderr)


def test_fit_report_says_it_is_loading_a_large_file(heartbeats, tmp_path):
    "A file that takes a while to load shows a line on a terminal (progress=True), as the fit itself does."
    from dpmf_lit.cli import main as cli
    seen = heartbeats
    f = tmp_path / "r.csv"
    f.write_text("user,item,rating\n" + "".join(f"{u},{i},{(u + i) % 5 + 1}\n" for u in range(30) for i in range(20)))
    cli.fit_report("global-mean", str(f), options={"scale": "1,5"}, progress=True)
    assert (f"loading {f}", True) in seen and ("global-mean: fitting", True) in seen


def test_a_declared_catalogue_puts_the_item_codes_on_it_and_the_headline_end_to_end(tmp_path):
    "`--catalogue FILE`: n_items is the catalogue's (items nobody rated included), the guarantee is end to end with a declared scale; without it, conditional on the items the ratings name; a rated item the file misses is a usage error."
    mine = _plain_csv(tmp_path / "mine.csv")
    items = sorted({line.split(",")[1] for line in mine.read_text().splitlines()[1:]})
    (tmp_path / "cat.txt").write_text("\n".join(items + ["99990", "99991"]) + "\n")
    base = ("fit", "dp-bias", "--dataset", mine, "--scale", "1,5", "--set", "seed=0", "--json")
    with_cat, without = dpmf(*base, "--catalogue", tmp_path / "cat.txt"), dpmf(*base)
    assert with_cat.returncode == 0 and without.returncode == 0, (with_cat.stderr, without.stderr)
    a, b = json.loads(with_cat.stdout)["privacy"], json.loads(without.stdout)["privacy"]
    assert a["coverage"] == "end-to-end" and "end to end" in a["summary"], a["summary"]
    assert b["summary"].startswith(f"if the catalogue of {len(items):,} items, read from the data, is public: ("), b["summary"]
    (tmp_path / "short.txt").write_text("\n".join(items[1:]) + "\n")
    p = dpmf(*base, "--catalogue", tmp_path / "short.txt")
    assert p.returncode == 2 and "dpmf: error:" in p.stderr and "the ratings name items that are not in the catalogue" in p.stderr, p.stderr


def test_a_negative_scale_is_given_with_a_space_as_with_an_equals_sign(tmp_path):
    "The fuzz: `--scale -10,10` stopped at argparse ('expected one argument'); only `--scale=-10,10` worked."
    f = tmp_path / "signed.csv"
    f.write_text("user,item,rating\n" + "".join(f"u{u},{i},{(u * i) % 21 - 10}\n" for u in range(30) for i in range(20)))
    runs = [dpmf("fit", "dp-bias", "--dataset", f, *scale, "--set", "seed=0", "--json") for scale in (("--scale", "-10,10"), ("--scale=-10,10",))]
    assert [p.returncode for p in runs] == [0, 0], [p.stderr for p in runs]
    a, b = (json.loads(p.stdout) for p in runs)
    assert a["rmse"] == b["rmse"] and "read from the data" not in runs[0].stderr and "rating scale" not in a["privacy"]["scope"]
    p = dpmf("fit", "global-mean", "--dataset", f, "--scale", "-5,10")
    assert p.returncode == 2 and "rating=-10 is outside the scale [-5, 10]" in p.stderr, p.stderr   # the scale was read, and used
    p = dpmf("compare", "--dataset", f, "--epsilons", "-1,2", "--out", tmp_path / "out")
    assert p.returncode == 2 and "every ε must be a finite number > 0" in p.stderr and not (tmp_path / "out").exists(), p.stderr


READ_BODY = "".join(f"u{u},i{i},{(u * i) % 5 + 1}\n" for u in range(6) for i in range(4))


@pytest.mark.parametrize("text, message", [
    ("u1,i1,NaN\n" + READ_BODY, "line 1: malformed line (rating 'NaN' is not a number)"),        # was: the line dropped, exit 0
    ("u1,i1,\n" + READ_BODY, "line 1: malformed line (rating is empty"),
    ("u1,i1,good\n" + READ_BODY, "line 1: malformed line (rating 'good' is not a number)"),
    ("user,item,rating\nu\x009,i1,3\n" + READ_BODY, "line 2: malformed line (a NUL byte"),          # was: accepted
    ("u1,i9," + "x" * 10**6 + "\n" + READ_BODY, "line 1: "),                                      # was: an internal error
    (READ_BODY + "u9,i9," + "x" * 10**6 + "\n", "line 25: malformed line (rating 'xxx"),           # was: the 1 MB field echoed
    ("\udcff", "r.csv"),                                                                            # random bytes, below
], ids=["nan-first", "empty-first", "word-first", "nul", "huge-first", "huge-field", "random-bytes"])
def test_a_bad_ratings_file_is_one_short_error_line(tmp_path, text, message):
    f = tmp_path / "r.csv"
    if text == "\udcff": f.write_bytes(bytes(range(256)) * 8 + b"\r\x00\n,,\r")
    else: f.write_text(text)
    p = dpmf("fit", "global-mean", "--dataset", f, "--scale", "1,5", "--figures-dir", tmp_path / "f", "--build-dir", tmp_path / "b")
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stderr[:500])
    assert p.stderr.startswith(f"dpmf: error: {f}") and message in p.stderr and len(p.stderr) < 500, p.stderr[:500]
    assert not (tmp_path / "f").exists() and not (tmp_path / "b").exists()


def test_a_file_of_cr_line_ends_is_read_as_its_lf_twin(tmp_path):
    "CR alone (classic Mac OS) used to stop at `dpmf: internal error: new-line character seen in unquoted field`."
    text = "user,item,rating\n" + READ_BODY
    (tmp_path / "lf.csv").write_text(text)
    (tmp_path / "cr.csv").write_bytes(text.replace("\n", "\r").encode())
    runs = [dpmf("fit", "bias", "--dataset", tmp_path / n, "--scale", "1,5", "--json") for n in ("lf.csv", "cr.csv")]
    assert [p.returncode for p in runs] == [0, 0], [p.stderr for p in runs]
    a, b = (json.loads(p.stdout) for p in runs)
    assert (a["n_train"], a["n_test"], a["rmse"]) == (b["n_train"], b["n_test"], b["rmse"]) and a["n_train"] + a["n_test"] == 24


# ---------------------------------------------------------------- start-up, the first fit's compiling, warnings
HEAVY = ("numba", "pandas", "scipy", "dp_accounting")


@pytest.mark.parametrize("argv, allowed", [(["--help"], ()), (["data", "--help"], ()), (["warmup", "--help"], ()),
                                           (["fit", "pmf", "--dataset", "x"], ()), (["reproduce", "--help"], ("numpy",))])
def test_help_and_parsing_import_the_standard_library_alone(argv, allowed):
    """`dpmf --help` took seconds importing the privacy accountant and numba's kernels; parsing a command line now imports
    none of them, nor numpy (`reproduce --help` lists the profiles of the settings module, which needs numpy alone)."""
    code = ("import sys\nfrom dpmf_lit.cli.main import build_parser, main\n"
            f"argv = {argv!r}\n"
            "try: main(argv) if '--help' in argv else build_parser().parse_args(argv)\nexcept SystemExit: pass\n"
            f"print(sorted(m for m in {HEAVY + ('numpy',)!r} if m in sys.modules and m not in {allowed!r}))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip().splitlines()[-1] == "[]", (p.stdout[-500:], p.stderr[-2000:])


def test_the_compile_note_is_shown_whole_at_any_width():
    "A first run's compiling was cut from the 80-column headline: it is now a note of its own, wrapped, never cut."
    from dpmf_lit.cli.main import COMPILE_NOTE, compile_note, fit_summary
    from dpmf_lit.core.privacy import PrivacyReport
    rep = {"mechanism": "dp-bias", "dataset": "ml-100k", "rmse": 1.0, "mae": 0.8, "fit_seconds": 73.37, "compile_seconds": 70.1,
           "privacy": PrivacyReport().to_dict(), "notes": []}
    for width in (60, 80, 160):
        out = fit_summary(rep, width=width, compiled=176.9)
        assert max(map(len, out.split("note:")[1].splitlines())) <= width and "..." not in out.split("note:")[1]
        assert " ".join(out.split("note: ")[1].split()) == compile_note(176.9), out
    assert "note:" not in fit_summary(rep, width=80, compiled=COMPILE_NOTE / 2)          # a warm run says nothing
    assert compile_note(70.1) in " ".join(fit_summary(rep, width=80).split())              # default: the fit's own compiling


def test_a_warning_of_the_package_is_one_line(monkeypatch, capsys):
    from dpmf_lit.cli import main as cli
    from dpmf_lit.model import mechanism
    monkeypatch.setattr(mechanism, "LONG_WORK", 1.0)
    assert cli.main(["fit", "user-features", "--dataset", SMALL, "--json"]) == 0
    err = capsys.readouterr().err
    assert "dpmf: warning: user-features: the 19 public item features of synthetic enter every user's solve" in err, err
    assert "LongFitWarning" not in err and "warnings.warn" not in err


def test_numba_has_a_cache_folder_when_the_package_cannot_be_written(tmp_path):
    "A read-only install with no writable HOME made numba refuse to define any cached kernel (no locator): a folder of TMPDIR is used."
    code = ("import os, dpmf_lit.core.checks as c\nc._cache_writable = lambda folder: False\nprint(c.numba_cache_fallback())\n"
            "import numba\nprint(numba.config.CACHE_DIR)\nimport numpy as np\nfrom dpmf_lit.core.grouping import group_by\n"
            "group_by(np.array([0, 1, 0], np.int32), 2)\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"} | {"TMPDIR": str(tmp_path)}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    folder, config = p.stdout.split()
    assert folder == config and folder.startswith(str(tmp_path)) and any(Path(folder).rglob("*.nbi"))


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_after_the_warm_up_a_first_fit_compiles_nothing(tmp_path):
    "`dpmf warmup dp-bias` into an empty cache, then `dpmf fit dp-bias` on a file in MovieLens 100K's format in a fresh process: no compiling."
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    p = dpmf("warmup", "dp-bias", "--no-progress", env=env)
    assert p.returncode == 0 and p.stdout.startswith("dpmf warmup: 1 step in"), p.stderr[-2000:]
    from dpmf_lit.cli.warmup import warm_files
    (tmp_path / "f").mkdir()
    ratings, items = warm_files(tmp_path / "f", n_users=300, n_items=200)
    p = dpmf("fit", "dp-bias", "--dataset", ratings, "--format", "movielens-100k", "--item-features", items, env=env)
    assert p.returncode == 0 and "numba compiling" not in p.stdout, p.stdout + p.stderr
    rep = json.loads(dpmf("fit", "dp-bias", "--dataset", ratings, "--format", "movielens-100k", "--json", env=env).stdout)
    assert rep["compile_seconds"] == 0.0


@pytest.mark.parametrize("argv", [["--help"], ["reproduce", "--help"], ["data", "--help"]])
def test_help_imports_no_paper_and_no_accountant(argv):
    "An import-graph check, not a timer: the top-level help and the commands that list no mechanism import no paper module, no dp_accounting, no numba."
    code = ("import io, contextlib, sys\nfrom dpmf_lit.cli.main import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()):\n    try: main({argv!r})\n    except SystemExit: pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('dpmf_lit.papers') or m.split('.')[0] in ('dp_accounting', 'numba')))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]", f"dpmf {' '.join(argv)} imports {p.stdout.strip()}"
