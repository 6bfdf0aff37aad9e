"""The `dpmf` console script: its machine-readable contract, its help, and its errors (run as a subprocess)."""
import json, os, subprocess, sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent / "dpmf"
SMALL = "synthetic:n_users=300,n_items=200,n_ratings=10000"


def dpmf(*args, cwd=None, env=None):
    "Run the installed console script (or `dpmf_lit.cli.main` in a fresh interpreter without one)."
    cmd = [str(BIN)] if BIN.exists() else [sys.executable, "-c", "import sys; from dpmf_lit.cli import main; sys.exit(main())"]
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
    from dpmf_lit import bench  # noqa: F401  (skip cleanly if the bench module is absent)
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
    ("pmf", ["lr=0.3", "d=8"], "(lr=0.3, solver='sgd'): lower lr"),
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
    line = next(l for l in p.stdout.splitlines() if l.strip().startswith("privacy"))
    assert "(1, 0)-DP per rating (scope: for V given U, where U is trained non-privately" in line and "not epsilon-DP" in line
    rep = json.loads(dpmf("fit", "hua", "--dataset", SMALL, "--set", "d=4", "--json").stdout)
    assert rep["privacy"]["scope"] and rep["privacy"]["summary"] in p.stdout


def test_fit_help_lists_every_mechanism_and_its_parameters():
    from dpmf_lit.mechanism import mechanisms
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
    from dpmf_lit import cli
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
    from dpmf_lit import cli, data
    def fail(*a, **k): raise exc
    monkeypatch.setattr(data, "fetch_dataset", fail)
    assert cli.main(["data", "fetch", "ml-100k"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dpmf: error:") and "Traceback" not in err


def test_user_error_is_exit_2(monkeypatch, capsys):
    from dpmf_lit import cli, data
    from dpmf_lit.checks import UserError
    def fail(*a, **k): raise UserError("no network: download ml-100k by hand into data/ml-100k")
    monkeypatch.setattr(data, "fetch_dataset", fail)
    assert cli.main(["data", "fetch", "ml-100k"]) == 2
    assert capsys.readouterr().err == "dpmf: error: no network: download ml-100k by hand into data/ml-100k\n"


def test_bench_rank_option_is_not_mistaken_for_a_global_abbreviation(capsys):
    "`--d` (the bench's ranks) once failed as an ambiguous prefix of the global --data-dir/--debug."
    from dpmf_lit.cli import build_parser
    args = build_parser().parse_args(["bench", "--quick", "--d", "8", "16"])
    assert args.ds == [8, 16]
