"""Nothing lost: a command that takes an output path leaves what the user had there as it was (a folder of theirs, a file,
their things beside it), refusing before any work where it would have to replace them; a run into its own earlier output
still works. Run as the user runs them: the console script in a subprocess."""
import json, os, subprocess, sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent / "dpmf"
RUN = ("--epsilons", "1", "--seeds", "1", "--splits", "1", "--no-progress")


def dpmf(*args, cwd=None):
    cmd = [str(BIN)] if BIN.exists() else [sys.executable, "-m", "dpmf_lit.cli.main"]
    return subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True, timeout=600, cwd=cwd,
                          env={**os.environ, "MPLBACKEND": "Agg"})


def tiny(path: Path) -> Path:
    "A user's file of 20 ratings: 5 users x 4 items, string user ids."
    path.write_text("user,item,rating\n" + "".join(f"u{u},{i},{(u + i) % 5 + 1}\n" for u in range(5) for i in range(4)))
    return path


def users_things(root: Path) -> dict:
    "A folder of the user's (a note, a sub-folder with a file) and a file, under `root`; what they hold."
    (root / "mine" / "runs").mkdir(parents=True)
    (root / "mine" / "notes.txt").write_text("my notes")
    (root / "mine" / "runs" / "r1.json").write_text("{}")
    (root / "afile").write_text("my file")
    return snapshot(root)


def snapshot(root: Path) -> dict:
    "Every path under `root` with its bytes (None for a folder)."
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("target", ["mine", "afile"])
def test_compare_out_on_the_users_folder_or_file_is_refused_and_nothing_is_touched(tmp_path, target):
    "The fuzz: `--out DIR` emptied the user's folder (exit 0); `--out FILE` renamed the file to FILE.old-PID."
    before = users_things(tmp_path / "u")
    data = tiny(tmp_path / "r.csv")
    p = dpmf("compare", "--dataset", data, "--scale", "1,5", *RUN, "--out", tmp_path / "u" / target, "--build-dir", tmp_path / "b")
    assert p.returncode == 2 and p.stdout == "", (p.returncode, p.stderr)
    assert p.stderr.strip().splitlines()[-1].startswith(f"dpmf: error: --out {str(tmp_path / 'u' / target)!r} "), p.stderr
    assert "Traceback" not in p.stderr and "loading" not in p.stderr, p.stderr     # refused before the data was read
    assert snapshot(tmp_path / "u") == before and not (tmp_path / "b").exists()


def test_compare_writes_a_record_on_20_ratings_and_reruns_into_its_own_output(tmp_path):
    "The fuzz: 20 ratings ran to the end, then died with TypeError in figure_slices, writing nothing. Now: a record, twice."
    before = users_things(tmp_path)
    data = tiny(tmp_path / "r.csv")
    out = tmp_path / "new" / "run"
    for k in range(2):
        p = dpmf("compare", "--dataset", data, "--scale", "1,5", *RUN, "--out", out, "--json")
        assert p.returncode == 0, p.stderr[-3000:]
        assert json.loads(p.stdout)["folder"] == str(out)
        rec = json.loads((out / "record.json").read_text())
        assert rec["dataset"] == str(data) and rec["epsilons"] == [1.0]
        assert sorted(q.name for q in out.iterdir()) == sorted(f"compare_{n}.{x}" for n in ("epsilon", "slices") for x in ("png", "svg")) + ["record.json"]
        assert sorted(q.name for q in (tmp_path / "new").iterdir()) == ["run"]            # no staging or old folder left beside it
    after = snapshot(tmp_path)
    assert {k: v for k, v in after.items() if k in before} == before                      # the user's things beside it, as they were
    (out / "notes.txt").write_text("added by the user")                                  # an earlier run, with something of the user's
    p = dpmf("compare", "--dataset", data, "--scale", "1,5", *RUN, "--out", out)
    assert p.returncode == 2 and "is not an earlier run of dpmf compare" in p.stderr and "'notes.txt'" in p.stderr, p.stderr
    assert (out / "notes.txt").read_text() == "added by the user" and (out / "record.json").is_file()


@pytest.mark.parametrize("argv", [
    ("fit", "global-mean", "--dataset", "{data}", "--scale", "1,5"),
    ("compare", "--dataset", "{data}", "--scale", "1,5", *RUN),
    ("reproduce", "--status"),
], ids=["fit", "compare", "reproduce-status"])
def test_the_settings_folders_keep_the_users_things(tmp_path, argv):
    "--figures-dir and --build-dir pointed at folders of the user's: what they held is still there, as it was."
    for d in ("f", "b"): (tmp_path / d).mkdir()
    before = {d: users_things(tmp_path / d) for d in ("f", "b")}
    data = tiny(tmp_path / "r.csv")
    p = dpmf(*[a.format(data=data) for a in argv], "--figures-dir", tmp_path / "f", "--build-dir", tmp_path / "b")
    assert p.returncode in (0, 1) and "Traceback" not in p.stderr and "error" not in p.stderr, p.stderr   # --status: 1 when stale
    for d in ("f", "b"):
        after = snapshot(tmp_path / d)
        assert {k: v for k, v in after.items() if k in before[d]} == before[d], d
