"""Fault injection on real data: a run over 20,000+ t0 records is killed with SIGKILL,
SIGTERM and SIGINT at named points (:mod:`cleanpipe.fault_points`: while reading, mid-run,
during the commit), and after each:

* no process of the run is left (its whole session, read from /proc);
* the previous output, if there was one, is intact and byte-identical;
* a rerun is byte-identical to an uninterrupted run, and leaves nothing hidden behind.

The run stops at a point by itself and says so in a file; the test waits for that file,
not for a time, so the kill lands at the same place on any machine. Three cases (one per
signal, each at another point) run with ``make test``; the full matrix is ``slow``.
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest

from tests._kill_helpers import (
    TIMED,
    WAIT_SECONDS,
    children_alive,
    hidden_siblings,
    kill_and_reap,
    start_cli,
    tree_bytes,
    wait_paused,
)
from tests.conftest import realdata

pytestmark = pytest.mark.realdata

ROWS = 20_000
EXIT = {signal.SIGKILL: -signal.SIGKILL, signal.SIGTERM: 143, signal.SIGINT: 130}
#: points where the workers are running (the commit comes after they are done)
WITH_WORKERS = ("read", "midrun")


def _pipeline(path: Path, files: list[Path]) -> Path:
    path.write_text(
        f"input: {{path: {json.dumps([str(f) for f in files])}}}\n"
        "fields: [prompt, completion]\nbatch_size: 1000\n"
        # a global stage: two passes over the rows, with a spill file between them
        "stages: [{stage: whitespace}, {stage: exact_dedup}]\n", encoding="utf-8")
    return path


def _run(pipe: Path, out: Path) -> None:
    proc = start_cli(["run", str(pipe), "-o", str(out), "--overwrite", "-q", "-j", "2"])
    _, err = proc.communicate(timeout=WAIT_SECONDS)
    assert proc.returncode == 0, err


@pytest.fixture(scope="module")
def t0(tmp_path_factory, shared_data: Path) -> dict[str, Path]:
    """The pipeline over the first t0 shards holding >= 20,000 records, its uninterrupted
    output, and a previous output (of fewer shards) for a killed ``--overwrite`` to spare."""
    folder = realdata("sft_self_instruct_t0_50k", "data_per_template")
    files, rows = [], 0
    for f in sorted(folder.glob("*.jsonl")):
        if rows >= ROWS:
            break
        if f.stat().st_size:
            files.append(f)
            rows += sum(1 for line in f.open(encoding="utf-8") if line.strip())
    assert rows >= ROWS
    root = tmp_path_factory.mktemp("t0")
    paths = {"pipe": _pipeline(root / "p.yaml", files),
             "small": _pipeline(root / "small.yaml", files[:3]),
             "ref": root / "ref", "previous": root / "previous"}
    _run(paths["pipe"], paths["ref"])
    _run(paths["small"], paths["previous"])
    assert json.loads((paths["ref"] / "report.json").read_text())["totals"]["read"] >= ROWS
    return paths


def _kill_at(t0: dict[str, Path], tmp_path: Path, point: str, sig: signal.Signals,
             previous: bool) -> None:
    out = tmp_path / "out"
    if previous:
        shutil.copytree(t0["previous"], out)
    before = tree_bytes(out) if previous else None
    proc = start_cli(["run", str(t0["pipe"]), "-o", str(out), "--overwrite", "-q", "-j", "2"],
                     pause_at=point, pause_dir=tmp_path)
    pid = wait_paused(proc, tmp_path, point)
    if point in WITH_WORKERS:
        assert children_alive(pid), "no worker processes at this point: nothing to test"
    rc, err, left = kill_and_reap(proc, sig)
    assert left == [], f"still running after {sig.name} at {point}: {left}"
    assert rc == EXIT[sig], err
    if point == "swapped":  # killed after the new output took the old one's place
        assert tree_bytes(out, TIMED) == tree_bytes(t0["ref"], TIMED)
    elif previous:
        assert tree_bytes(out) == before
    else:
        assert not out.exists()
    if sig != signal.SIGKILL:  # handled: the temporary folder and the lock are gone
        assert hidden_siblings(out) == []
    # the rerun reclaims what a SIGKILL left and writes what an uninterrupted run writes
    _run(t0["pipe"], out)
    assert tree_bytes(out, TIMED) == tree_bytes(t0["ref"], TIMED)
    report, ref = (json.loads((d / "report.json").read_text()) for d in (out, t0["ref"]))
    assert report["totals"] == ref["totals"]
    assert hidden_siblings(out) == []


@pytest.mark.parametrize(("sig", "point", "previous"), [
    (signal.SIGKILL, "midrun", True),
    (signal.SIGTERM, "commit", True),
    (signal.SIGINT, "read", False),
])
def test_killed_run(t0, tmp_path, sig, point, previous):
    _kill_at(t0, tmp_path, point, sig, previous)


FAST = {(signal.SIGKILL, "midrun"), (signal.SIGTERM, "commit"), (signal.SIGINT, "read")}


@pytest.mark.slow
@pytest.mark.parametrize("point", ["read", "midrun", "commit", "swapped"])
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_killed_run_everywhere(t0, tmp_path, sig, point):
    if (sig, point) in FAST:
        pytest.skip("in test_killed_run")
    _kill_at(t0, tmp_path, point, sig, previous=True)
