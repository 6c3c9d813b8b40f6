"""Faults: a killed run leaves nothing that looks complete; a full or read-only output fails
clearly and leaves no partial output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cleanpipe import Pipeline
from cleanpipe.io.writers import OutputError
from tests._robust_helpers import cli, write_pipeline

REPO = Path(__file__).resolve().parent.parent


def _corpus(path: Path, n: int = 2000) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            text = f"drop {i}" if i % 7 == 0 else f"row {i} 中文"
            f.write(json.dumps({"text": text, "i": i}, ensure_ascii=False) + "\n")
    return path


def _files(out: Path) -> dict[str, bytes]:
    skip = {"report.json", "report.md", "report.html", "junit.xml"}  # hold timings
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and p.name not in skip}


def _run_slow(src: Path, out: Path, pause_dir: Path | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    extra = [str(pause_dir)] if pause_dir is not None else []
    return subprocess.Popen([sys.executable, str(REPO / "tests" / "_slow_run.py"), str(src),
                             str(out), *extra], env=env, cwd=REPO)


def _leftovers(parent: Path, name: str) -> list[Path]:
    return [p for p in parent.iterdir() if p.name.startswith(f".{name}.")]


@pytest.mark.parametrize("previous", [False, True])
def test_sigkill_midway_then_rerun_is_identical(tmp_path, previous):
    src = _corpus(tmp_path / "in.jsonl")
    ref = tmp_path / "ref"
    _run_slow(src, ref).wait(timeout=120)
    assert (ref / "_SUCCESS").exists()
    out = tmp_path / "out"
    if previous:  # a previous complete output must survive a killed overwrite
        _run_slow(src, out).wait(timeout=120)
        before = _files(out)
    pause = tmp_path / "pause"
    pause.mkdir()
    proc = _run_slow(src, out, pause)
    # the run signals half-way through its batches and then waits (forever: no "resume")
    deadline = time.monotonic() + 120
    while not (pause / "paused").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert (pause / "paused").exists(), f"the run never reached its pause (exit {proc.poll()})"
    assert proc.poll() is None
    assert _leftovers(tmp_path, "out"), "half-way, the run writes into its temporary folder"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    if previous:
        assert _files(out) == before  # the previous complete output, untouched
    else:
        assert not out.exists()  # nothing that looks like an output at all
    # whatever is left is hidden, and has no _SUCCESS
    for left in _leftovers(tmp_path, "out"):
        assert not (left / "_SUCCESS").exists()
    # rerun: byte-identical to the uninterrupted run, and the leftovers are cleaned
    _run_slow(src, out).wait(timeout=120)
    assert (out / "_SUCCESS").exists()
    assert _files(out) == _files(ref)
    assert _leftovers(tmp_path, "out") == []


def _mount_tmpfs(mnt: Path, options: str) -> None:
    """Mount a tmpfs at ``mnt`` (needs CAP_SYS_ADMIN; skips without it)."""
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")


@pytest.fixture
def read_only_dir(tmp_path):
    """An empty folder nobody may write into: chmod 500, or for root (whom permission bits
    do not stop) a read-only tmpfs."""
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() == 0:
        _mount_tmpfs(ro, "ro,size=64k")
        yield ro
        subprocess.run(["umount", str(ro)], check=False)
    else:
        ro.chmod(0o500)
        yield ro
        ro.chmod(0o700)


def test_read_only_output_parent(tmp_path, read_only_dir, capsys):
    src = _corpus(tmp_path / "in.jsonl", 10)
    pipe = write_pipeline(tmp_path / "p.yaml", src)
    code, _, err = cli(capsys, "run", str(pipe), "-o", str(read_only_dir / "out"), "-q")
    assert code == 2 and "not writable" in err and str(read_only_dir) in err
    assert list(read_only_dir.iterdir()) == []


def test_output_parent_is_a_file(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    src = _corpus(tmp_path / "in.jsonl", 10)
    pipe = write_pipeline(tmp_path / "p.yaml", src)
    code, _, err = cli(capsys, "run", str(pipe), "-o", str(blocker / "out"), "-q")
    assert code == 2 and str(blocker) in err and "Traceback" not in err
    assert blocker.read_text() == "x"


@pytest.fixture
def tiny_fs(tmp_path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    _mount_tmpfs(mnt, "size=256k")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=False)


def test_disk_full_clear_error_no_partial_output(tmp_path, tiny_fs, capsys):
    src = tmp_path / "in.jsonl"
    with src.open("w") as f:
        for _ in range(3000):  # incompressible text: far more than 256 KiB of output
            f.write(json.dumps({"text": os.urandom(200).hex()}) + "\n")
    pipe = write_pipeline(tmp_path / "p.yaml", src)
    code, _, err = cli(capsys, "run", str(pipe), "-o", str(tiny_fs / "out"), "-q")
    assert code == 2, err
    assert "no space left" in err.lower() and str(tiny_fs) in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert list(tiny_fs.iterdir()) == []  # no output, no temporary folder left


def test_api_disk_full_raises_output_error(tmp_path, tiny_fs):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": os.urandom(200).hex()}) + "\n"
                           for _ in range(3000)))
    with pytest.raises(OutputError, match="No space left on device"):
        Pipeline(stages=[]).run(src, tiny_fs / "out")
    assert list(tiny_fs.iterdir()) == []
