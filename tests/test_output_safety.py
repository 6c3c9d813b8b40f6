"""Never lose what the user has (issue #15): ``--overwrite`` replaces only folders cleanpipe
wrote; an output never overlaps an input; one run per output (an OS lock); workers die with
the run; SIGTERM cleans up like Ctrl-C; a killed run's temporary folder is reclaimed."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from cleanpipe import Pipeline
from cleanpipe.io.writers import OutputError
from tests._kill_helpers import (
    children_alive,
    hidden_siblings,
    kill_and_reap,
    start_cli,
    tree_bytes,
    wait_paused,
)
from tests._robust_helpers import cli, write_pipeline

MANIFEST = "_cleanpipe.json"  # cleanpipe.io.output_guard.MANIFEST, spelled out (see _kill_helpers)


def _corpus(folder: Path, n: int = 2000) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "x.jsonl").open("w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"text": f"row {i} " + "word " * (i % 13)}) + "\n")
    return folder


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path]:
    data = _corpus(tmp_path / "data")
    pipe = write_pipeline(tmp_path / "p.yaml", extra="batch_size: 100\n")
    return data, pipe


def _run(capsys, pipe: Path, data: Path, out: Path | str, *extra: str) -> tuple[int, str]:
    code, _, err = cli(capsys, "run", str(pipe), "-i", str(data), "-o", str(out), "-q", *extra)
    return code, err


# ------------------------------------------------------------------ what --overwrite replaces


def test_overwrite_refuses_a_folder_of_user_files(setup, tmp_path, capsys):
    data, pipe = setup
    user = tmp_path / "u"
    user.mkdir()
    (user / "t.txt").write_text("x")
    for extra in ((), ("--overwrite",)):
        code, err = _run(capsys, pipe, data, user, *extra)
        assert code == 2
        assert err.strip() == (f"cleanpipe: {user}: not replaced: it was not written by"
                               f" cleanpipe (no {MANIFEST}; it holds t.txt); choose another"
                               " --output")
        assert tree_bytes(user) == {"t.txt": b"x"}
        assert hidden_siblings(user) == []


def test_overwrite_keeps_a_file_added_to_our_output(setup, tmp_path, capsys):
    data, pipe = setup
    out = tmp_path / "out"
    assert _run(capsys, pipe, data, out)[0] == 0
    (out / "data" / "notes.txt").write_text("mine")
    before = tree_bytes(out)
    code, err = _run(capsys, pipe, data, out, "--overwrite")
    assert code == 2
    assert "not replaced: it holds files cleanpipe did not write (data/notes.txt)" in err
    assert tree_bytes(out) == before


def test_overwrite_replaces_our_output_and_one_from_before_the_manifest(setup, tmp_path,
                                                                         capsys):
    data, pipe = setup
    out = tmp_path / "out"
    assert _run(capsys, pipe, data, out)[0] == 0
    listed = json.loads((out / MANIFEST).read_text())["files"]
    assert sorted(listed) == sorted(f for f in tree_bytes(out) if f != MANIFEST)
    code, err = _run(capsys, pipe, data, out)
    assert code == 2 and "already exists; pass --overwrite to replace it" in err
    assert _run(capsys, pipe, data, out, "--overwrite")[0] == 0
    (out / MANIFEST).unlink()  # as written by a version without the manifest
    assert _run(capsys, pipe, data, out, "--overwrite")[0] == 0
    assert (out / MANIFEST).exists()
    assert hidden_siblings(out) == []


@pytest.mark.parametrize("where", ["input", "parent", "inside"])
@pytest.mark.parametrize("overwrite", [False, True])
def test_output_overlapping_an_input_is_refused_before_work(setup, tmp_path, capsys, where,
                                                            overwrite):
    data, pipe = setup
    out = {"input": data, "parent": tmp_path, "inside": data / "cleaned"}[where]
    why = {"input": f"is the input {data}", "parent": f"holds the input {data}",
           "inside": f"is inside the input {data}"}[where]
    before = tree_bytes(tmp_path)
    names = sorted(p.name for p in tmp_path.parent.iterdir())
    code, err = _run(capsys, pipe, data, out, *(("--overwrite",) if overwrite else ()))
    assert code == 2
    assert err.startswith(f"cleanpipe: {out}: {why}") and len(err.strip().splitlines()) == 1
    assert tree_bytes(tmp_path) == before  # nothing written, nothing removed
    assert sorted(p.name for p in tmp_path.parent.iterdir()) == names


def test_output_dot_is_refused_before_work(setup, tmp_path, capsys, monkeypatch):
    data, pipe = setup
    here = tmp_path / "here"
    assert _run(capsys, pipe, data, here)[0] == 0  # even a folder of ours: it is the cwd
    before = tree_bytes(tmp_path)
    monkeypatch.chdir(here)
    code, err = _run(capsys, pipe, data, ".", "--overwrite")
    assert code == 2
    assert err.strip() == ("cleanpipe: .: is the current folder or holds it; choose another"
                           " --output")
    assert tree_bytes(tmp_path) == before


def test_killed_commit_fallback_puts_the_old_output_back(setup, tmp_path):
    # where the atomic swap is unavailable, a commit moves the old output aside first; a
    # kill right then leaves it under .NAME.old-PID-TAG: the next run puts it back
    data, _ = setup
    out = tmp_path / "out"
    Pipeline(stages=[]).run(data, out)
    before = tree_bytes(out)
    aside = tmp_path / ".out.old-999999999-0badc0de"  # no such PID: its owner is gone
    out.rename(aside)
    with pytest.raises(OutputError, match="already exists"):
        Pipeline(stages=[]).run(data, out)  # put back, and so not replaced without overwrite
    assert tree_bytes(out) == before and not aside.exists()


# ------------------------------------------------------------------ one run per output


def test_second_run_into_the_same_output_is_refused_naming_the_first(setup, tmp_path,
                                                                     capsys):
    data, pipe = setup
    out = tmp_path / "out"
    first = start_cli(["run", str(pipe), "-i", str(data), "-o", str(out), "-q", "-j", "1"],
                      pause_at="midrun", pause_dir=tmp_path)
    try:
        pid = wait_paused(first, tmp_path, "midrun")
        for extra in ((), ("--overwrite",)):
            code, err = _run(capsys, pipe, data, out, *extra)
            assert code == 2
            assert err.strip() == (f"cleanpipe: {out}: another cleanpipe run (pid {pid}) is"
                                   " writing this output; wait for it to finish or choose"
                                   " another --output")
    finally:
        rc, _, left = kill_and_reap(first, signal.SIGKILL)
    assert rc == -signal.SIGKILL and left == []
    assert not out.exists()
    # the kernel released the lock with the process: the next run goes ahead and reclaims
    # the killed run's temporary folder
    assert _run(capsys, pipe, data, out)[0] == 0
    assert hidden_siblings(out) == []


def test_a_lock_file_name_taken_by_someone_else_is_left_alone(setup, tmp_path, capsys):
    data, pipe = setup
    theirs = tmp_path / ".out.cleanpipe-lock"
    theirs.write_text("not ours")
    code, err = _run(capsys, pipe, data, tmp_path / "out")
    assert code == 2 and f"{theirs}: exists and was not written by cleanpipe" in err
    assert theirs.read_text() == "not ours" and not (tmp_path / "out").exists()


# ------------------------------------------------------------------ signals and workers


@pytest.mark.parametrize(("sig", "start"), [
    (signal.SIGKILL, "fork"), (signal.SIGKILL, "forkserver"),  # the server must die too
    (signal.SIGTERM, "fork"), (signal.SIGINT, "fork")])
def test_workers_die_with_the_main_process(setup, tmp_path, sig, start):
    data, pipe = setup
    out = tmp_path / "out"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {"TMPDIR": str(tmp)}
    if start == "forkserver":
        env["CLEANPIPE_WORKER_START"] = start
    proc = start_cli(["run", str(pipe), "-i", str(data), "-o", str(out), "-q", "-j", "2"],
                     pause_at="midrun", pause_dir=tmp_path, env=env)
    pid = wait_paused(proc, tmp_path, "midrun")
    assert children_alive(pid), "the run has no worker processes to test with"
    rc, err, left = kill_and_reap(proc, sig)
    assert left == [], f"left running after {sig.name}: {left}"
    assert rc == {signal.SIGKILL: -9, signal.SIGTERM: 143, signal.SIGINT: 130}[sig], err
    assert not out.exists()
    # the fork server's warm-up bytes: read once when it started, and deleted then
    assert not list(tmp.glob("cleanpipe-warm-*"))
    if sig != signal.SIGKILL:  # handled: the temporary folder and the lock are gone
        assert hidden_siblings(out) == []
        assert err.strip() == ("cleanpipe: terminated (SIGTERM)" if sig == signal.SIGTERM
                               else "cleanpipe: interrupted")


def test_temporary_folders_reclaimed_only_when_ours_and_dead(setup, tmp_path, capsys):
    data, pipe = setup
    out = tmp_path / "out"
    proc = start_cli(["run", str(pipe), "-i", str(data), "-o", str(out), "-q", "-j", "1"],
                     pause_at="midrun", pause_dir=tmp_path)
    wait_paused(proc, tmp_path, "midrun")
    kill_and_reap(proc, signal.SIGKILL)
    killed = [n for n in hidden_siblings(out) if ".tmp-" in n]
    assert len(killed) == 1 and (tmp_path / killed[0] / MANIFEST).exists()
    # not ours: the right name, but no manifest
    foreign = tmp_path / ".out.tmp-999999999-0badc0de"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("user file")
    # ours, but its owner (this test process) is alive
    live = tmp_path / f".out.tmp-{os.getpid()}-0badc0de"
    shutil.copytree(tmp_path / killed[0], live)
    assert _run(capsys, pipe, data, out)[0] == 0
    assert hidden_siblings(out) == sorted([foreign.name, live.name])
    assert (foreign / "keep.txt").read_text() == "user file"
