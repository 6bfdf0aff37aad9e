"""Where settings come from and where their paths point: relative paths typed by the user start at the
current folder, paths written in settings.ini start at its folder, an installed package works outside a
clone (packaged settings, user data folder), and a bad setting stops only the commands that use it."""
import json, os, shutil, subprocess, sys, sysconfig
from pathlib import Path

import pytest

from dpmf_lit.cli import main as cli
from dpmf_lit.core.settings import PATHS_HELP, find_settings_file, load_settings, package_settings_file

ROOT = Path(__file__).resolve().parents[1]
TINY = "synthetic:n_users=50,n_items=40,n_ratings=1000"


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    "The current folder is a fresh folder outside the clone; no DPMF_* variable is set."
    for k in list(os.environ):
        if k.startswith("DPMF_"): monkeypatch.delenv(k)
    here = tmp_path / "here"; here.mkdir()
    monkeypatch.chdir(here)
    return here


def test_user_paths_are_relative_to_the_current_folder(elsewhere, monkeypatch, capsys):
    ini = ROOT / "settings.ini"
    s = load_settings(ini, data_dir="dd1", figures_dir="out", build_dir="b", env={"DPMF_RESULTS_FILE": "r.json"})
    assert (s.data_dir, s.figures_dir, s.build_dir, s.results_file) == \
           (elsewhere / "dd1", elsewhere / "out", elsewhere / "b", elsewhere / "r.json")
    assert load_settings(ini, env={"DPMF_DATA_DIR": "dd2"}).data_dir == elsewhere / "dd2"
    # through the command line: `dpmf --data-dir dd1 data list` looks in ./dd1, not in the clone
    monkeypatch.setenv("DPMF_SETTINGS", str(ini))
    assert cli.main(["--data-dir", "dd1", "data", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert Path(rows["ml-100k"]["path"]) == elsewhere / "dd1" / "ml-100k" / "ratings.tsv"
    assert "relative to the current folder" in PATHS_HELP and "relative to the folder that holds it" in PATHS_HELP


def test_paths_written_in_the_file_are_relative_to_it(elsewhere):
    proj = elsewhere.parent / "proj"; proj.mkdir()
    shutil.copy(ROOT / "settings.ini", proj / "settings.ini")
    s = load_settings(proj / "settings.ini")
    assert s.data_dir == proj / "data" and s.manifest == proj / "nbs" / "experiments" / "manifest.json"
    assert s.root == proj and s.file == proj / "settings.ini" and not s.packaged


def test_another_projects_settings_ini_is_not_ours(elsewhere):
    (elsewhere / "settings.ini").write_text("[paths]\ndata_dir = theirs\n")
    (elsewhere / "pyproject.toml").write_text('[project]\nname = "someone-else"\n')
    assert find_settings_file() != elsewhere / "settings.ini"


def test_the_packaged_settings_are_the_top_level_file():
    packaged = package_settings_file()
    assert packaged == ROOT / "dpmf_lit" / "settings.ini"
    assert packaged.read_bytes() == (ROOT / "settings.ini").read_bytes(), \
        "dpmf_lit/settings.ini differs from settings.ini: run `cp settings.ini dpmf_lit/settings.ini`"
    assert 'dpmf_lit = ["settings.ini"]' in (ROOT / "pyproject.toml").read_text(), "settings.ini is not package data"


def test_the_packaged_copy_keeps_data_in_the_user_data_folder(elsewhere, monkeypatch):
    xdg = elsewhere.parent / "xdg"
    s = load_settings(package_settings_file(), env={"XDG_DATA_HOME": str(xdg)})
    assert s.packaged and s.data_dir == xdg / "dpmf-lit" / "data" and s.figures_dir == xdg / "dpmf-lit" / "figures"
    assert s.dataset("ml-100k").sha256  # the data-set entries come with it
    from dpmf_lit.records.provenance import load_manifest
    with pytest.raises(FileNotFoundError, match="come with a clone of dpmf-lit"): load_manifest(settings=s)
    monkeypatch.setenv("HOME", str(elsewhere.parent / "home"))
    assert load_settings(package_settings_file(), env={}).data_dir == elsewhere.parent / "home" / ".local" / "share" / "dpmf-lit" / "data"


def test_a_bad_run_setting_blocks_only_what_uses_it(elsewhere, monkeypatch, capsys):
    monkeypatch.setenv("DPMF_SETTINGS", str(ROOT / "settings.ini"))
    monkeypatch.setenv("DPMF_PROFILE", "huge")
    monkeypatch.setenv("DPMF_JOBS", "two")
    assert cli.main(["fit", "pmf", "--dataset", TINY, "--json", "--set", "epochs=2"]) == 0
    assert json.loads(capsys.readouterr().out)["rmse"] > 0
    assert cli.main(["data", "list", "--json"]) == 0
    capsys.readouterr()
    assert cli.main(["reproduce", "--no-progress"]) == 2
    assert "profile='huge' (from DPMF_PROFILE)" in capsys.readouterr().err
    assert cli.main(["reproduce", "--profile", "smoke", "--no-progress"]) == 2
    assert "jobs='two' (from DPMF_JOBS)" in capsys.readouterr().err
    # a bad data-set entry stops what reads that entry, not a fit on other data
    monkeypatch.setenv("DPMF_ML_1M_N_RATINGS", "lots")
    assert cli.main(["fit", "pmf", "--dataset", TINY, "--json", "--set", "epochs=2"]) == 0
    capsys.readouterr()
    assert cli.main(["data", "list"]) == 2
    assert "n_ratings='lots' (from DPMF_ML_1M_N_RATINGS)" in capsys.readouterr().err


# --- a real install of the built wheel, used outside any clone --------------------------------------

def _build_wheel(dist: Path) -> Path:
    "Build the wheel from a copy of the project (the build must not write into the clone)."
    src = dist.parent / "src"; src.mkdir()
    for name in ("pyproject.toml", "setup.cfg", "settings.ini", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "dpmf_lit", src / "dpmf_lit", ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), str(src)]
    try:
        import setuptools
        if int(setuptools.__version__.split(".")[0]) >= 77: cmd.insert(4, "--no-build-isolation")
    except ImportError: pass
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode and ("Could not find a version" in r.stderr or "NewConnectionError" in r.stderr or "No matching distribution" in r.stderr):
        pytest.skip(f"cannot build a wheel here (setuptools>=77 neither installed nor downloadable): {r.stderr[-300:]}")
    assert r.returncode == 0, r.stderr
    assert not (src / "build").exists(), "setuptools built in build/, the batch's output folder"
    assert (src / ".setuptools-build").is_dir()
    (wheel,) = dist.glob("dpmf_lit-*.whl")
    return wheel


@pytest.mark.slow
def test_installed_wheel_works_outside_a_clone(tmp_path):
    wheel = _build_wheel(tmp_path / "dist")
    import zipfile
    assert "dpmf_lit/settings.ini" in zipfile.ZipFile(wheel).namelist()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # the dependencies (and pip) come from this environment, read-only: its folder is added to sys.path
    # (its .pth files, such as the clone's editable install, are not processed)
    Path(site, "_shared_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--ignore-installed", str(wheel)],
                   check=True, timeout=300, capture_output=True)
    user = tmp_path / "user"; outside = tmp_path / "outside"; outside.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPMF_") and k != "PYTHONPATH"}
    env.update(HOME=str(user), XDG_DATA_HOME=str(user / "share"), DPMF_PROFILE="huge")
    run = lambda *a: subprocess.run([str(venv / "bin" / "dpmf"), *a], cwd=outside, env=env, capture_output=True, text=True, timeout=300)
    where = subprocess.run([str(py), "-c", "import dpmf_lit; print(dpmf_lit.__file__)"], cwd=outside, env=env,
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(venv)), where
    listed = run("data", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert Path(rows["ml-100k"]["path"]) == user / "share" / "dpmf-lit" / "data" / "ml-100k" / "ratings.tsv"
    fit = run("fit", "pmf", "--dataset", TINY, "--json", "--set", "epochs=2")
    assert fit.returncode == 0, fit.stderr
    assert json.loads(fit.stdout)["rmse"] > 0
    rep = run("reproduce", "--profile", "smoke", "--no-progress")
    assert rep.returncode == 2 and "clone" in rep.stderr and "Traceback" not in rep.stderr, rep.stderr
    assert not list(outside.iterdir()), "nothing may be written into the current folder"
