"""Shared by the output-safety and fault-injection tests: start the CLI in its own session,
stop it at a named point (:mod:`cleanpipe.fault_points`), kill it, and find what is left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: :mod:`cleanpipe.fault_points`' switches, spelled out so these tests import nothing new
#: (run against an older cleanpipe, they fail on its behaviour, not on an import)
PAUSE_AT_ENV, PAUSE_DIR_ENV = "CLEANPIPE_PAUSE_AT", "CLEANPIPE_PAUSE_DIR"
#: generous: the machines tests run on are shared; reaching a point is not timed, only bounded
WAIT_SECONDS = 300
#: files whose bytes hold timings: compared by the rows they describe, not byte for byte
TIMED = frozenset({"report.json", "report.md", "report.html", "junit.xml"})


def start_cli(args: list[str], *, pause_at: str | None = None, pause_dir: Path | None = None,
              env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.Popen:
    """``cleanpipe ARGS`` in a new session (its id is the process's PID), optionally armed
    to pause at ``pause_at``."""
    # the tests' own PYTHONPATH when set (a checkout under test), else this checkout
    full = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or str(REPO),
            **(env or {})}
    full.pop(PAUSE_AT_ENV, None)
    if pause_at is not None:
        assert pause_dir is not None
        full[PAUSE_AT_ENV] = pause_at
        full[PAUSE_DIR_ENV] = str(pause_dir)
    return subprocess.Popen([sys.executable, "-m", "cleanpipe.cli", *args], env=full,
                            cwd=cwd or REPO, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_paused(proc: subprocess.Popen, pause_dir: Path, point: str) -> int:
    """Block until ``proc`` reports it stopped at ``point``; returns its PID."""
    marker = pause_dir / point
    deadline = time.monotonic() + WAIT_SECONDS
    while not marker.exists():
        if proc.poll() is not None:
            _, err = proc.communicate()
            raise AssertionError(f"the run ended (rc {proc.returncode}) before {point!r}:"
                                 f" {err[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the run never reached {point!r}")
        time.sleep(0.05)
    return int(marker.read_text())


def _processes() -> list[tuple[int, str, int, int]]:
    """``(pid, state, parent pid, session id)`` of every process, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        found.append((int(entry.name), fields[0], int(fields[1]), int(fields[3])))
    return found


def session_alive(sid: int) -> list[int]:
    """PIDs of live (not zombie) processes in session ``sid``."""
    return [pid for pid, state, _, session in _processes()
            if session == sid and state not in ("Z", "X")]


def children_alive(pid: int) -> list[int]:
    """PIDs of the live processes whose parent is ``pid``."""
    return [p for p, state, parent, _ in _processes() if parent == pid and state not in "ZX"]


def kill_and_reap(proc: subprocess.Popen, sig: signal.Signals) -> tuple[int, str, list[int]]:
    """Send ``sig`` to the run's main process only; wait for it to end, then for the rest of
    its session to go. Returns its exit status, its stderr, and whatever is still alive
    (which should be nothing). Anything left is killed, so no test leaks processes."""
    sid = proc.pid
    proc.send_signal(sig)
    proc.wait(timeout=WAIT_SECONDS)  # not communicate(): leftovers would hold its pipes open
    deadline = time.monotonic() + 30
    left = session_alive(sid)
    while left and time.monotonic() < deadline:  # the kernel needs a moment to deliver
        time.sleep(0.1)
        left = session_alive(sid)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, err = proc.communicate(timeout=WAIT_SECONDS)
    return proc.returncode, err, left


def tree_bytes(folder: Path, skip: frozenset[str] = frozenset()) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes), but those named in ``skip``."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in skip}


def hidden_siblings(folder: Path) -> list[str]:
    """Names beside ``folder`` that cleanpipe derives from it (temporary folders, lock)."""
    return sorted(p.name for p in folder.parent.iterdir()
                  if p.name.startswith(f".{folder.name}."))
