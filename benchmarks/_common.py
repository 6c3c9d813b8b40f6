"""Shared benchmark helpers: where the data is, and timing a command with its peak memory.

Every measured thing runs in its own subprocess, so one measurement's imports, caches and
heap never leak into the next one's figures. Two memory figures are kept for each run:

* ``peak_rss_mb``: the peak of the *whole process tree* (the command and every worker it
  forks), sampled from ``/proc/<pid>/smaps_rollup`` as PSS, so pages shared between a parent
  and its forked workers are counted once, not once per worker. This is the figure the
  tables compare: multi-process tools would look smaller than they are if only one process
  were read.
* ``max_single_rss_mb``: the largest single process's ``ru_maxrss`` from ``wait4``, which
  the kernel keeps exactly (no sampling), as a cross-check.

Example (runs a one-line Python in a subprocess)::

    >>> import sys
    >>> m = measure([sys.executable, "-c", "print('hi')"])
    >>> m.rc, m.stdout.strip(), m.wall_s > 0, m.max_single_rss_mb > 0
    (0, 'hi', True, True)
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks"
RESULTS = BENCH / "results"
WORK = BENCH / ".work"
PROJECT_PY = REPO / ".venv" / "bin" / "python"
DATASET = "sft_self_instruct_t0_50k"


def data_root() -> Path | None:
    """The real-data folder: ``$CLEANPIPE_REALDATA``, else ``../shared/data`` from the repo.

    A git worktree sits one level deeper than the main checkout, so ``../../shared/data`` is
    tried too.
    """
    env = os.environ.get("CLEANPIPE_REALDATA")
    candidates = [Path(env)] if env else []
    candidates += [REPO.parent / "shared" / "data", REPO.parent.parent / "shared" / "data"]
    for c in candidates:
        if c.is_dir():
            return c.resolve()
    return None


def require_data(*parts: str) -> Path:
    """Path under the data folder, or exit with a clear message when it is absent."""
    root = data_root()
    if root is None:
        sys.exit("real data not found: set CLEANPIPE_REALDATA or provide ../shared/data")
    path = root.joinpath(*parts)
    if not path.exists():
        sys.exit(f"real data missing: {path}")
    return path


def command_line() -> str:
    """The command that produced a results file, as a user would type it from the repo root."""
    env = os.environ.get("CLEANPIPE_REALDATA")
    prefix = f"CLEANPIPE_REALDATA={shlex.quote(env)} " if env else ""
    script = os.path.relpath(Path(sys.argv[0]).resolve(), REPO)
    return prefix + shlex.join([".venv/bin/python", script, *sys.argv[1:]])


@dataclass
class Measurement:
    """What one subprocess run cost."""

    wall_s: float
    peak_rss_mb: float
    max_single_rss_mb: float
    rc: int
    stdout: str
    stderr: str
    #: 1-minute load average when the run started and ended: this machine may be shared, and
    #: a load above its core count means the figures include other work's contention.
    load: tuple[float, float] = (0.0, 0.0)
    #: Mean number of runnable tasks on the machine while the run lasted (the measured tool's
    #: own included, this sampler excluded), sampled with the memory: unlike the 1-minute
    #: load average it does not lag, so a short burst of other work before the run does not
    #: show, and one during it does.
    runnable_mean: float = 0.0

    @property
    def ok(self) -> bool:
        return self.rc == 0


def _tree_pids(root: int) -> list[int]:
    """``root`` and all its live descendants (read from /proc, no psutil needed)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: split after the last ')'.
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def runnable_tasks() -> int:
    """Tasks running or ready to run on the machine now (``/proc/loadavg``'s 4th field)."""
    with open("/proc/loadavg") as fh:
        return int(fh.read().split()[3].split("/")[0])


_SAMPLER = """
import sys, time
interval = float(sys.argv[1])
while True:
    with open("/proc/loadavg") as fh:
        print(int(fh.read().split()[3].split("/")[0]) - 1, flush=True)
    if sys.stdin in __import__("select").select([sys.stdin], [], [], interval)[0]:
        break
"""


class LoadWatch:
    """How loaded the machine was while a block of code ran in this process.

    ``load``: the 1-minute load average at entry and exit; ``runnable_mean``: the mean of
    :func:`runnable_tasks` sampled every ``interval`` seconds in between (this process's
    running thread included, the sampler not). The sampler is a separate process: a thread
    would hold the GIL while it reads, so a busy Python thread in this process would be
    parked on the GIL, not runnable, at every sample.

        >>> with LoadWatch(0.01) as w:
        ...     _ = sum(range(10**6))
        >>> w.runnable_mean >= 0 and len(w.load) == 2
        True
    """

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.load = (0.0, 0.0)
        self.runnable_mean = 0.0
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> LoadWatch:
        self._start = os.getloadavg()[0]
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _SAMPLER, str(self.interval)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        # Wait for the sampler's first line so the block is sampled from its start; that
        # sample itself is taken while this thread waits, so it is not counted.
        assert self._proc.stdout is not None
        self._proc.stdout.readline()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None
        out, _ = self._proc.communicate("stop\n")
        self.load = (self._start, os.getloadavg()[0])
        samples = [int(x) for x in out.split()]
        if samples:
            self.runnable_mean = sum(samples) / len(samples)

    def cell(self) -> str:
        """``2.1→2.4 [3.0]``: load average at start and end, [mean runnable tasks]."""
        return f"{self.load[0]:.1f}→{self.load[1]:.1f} [{self.runnable_mean:.1f}]"


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


class _TreeSampler(threading.Thread):
    def __init__(self, pid: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak_kb = 0
        self.runnable: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            total = sum(_pss_kb(p) for p in _tree_pids(self.pid))
            self.peak_kb = max(self.peak_kb, total)
            self.runnable.append(runnable_tasks() - 1)  # this sampling thread is one of them
            self.stop.wait(self.interval)


def measure(
    cmd: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | str | None = None,
    timeout: float | None = None,
    interval: float = 0.1,
    inherit: bool = True,
) -> Measurement:
    """Run ``cmd`` in a fresh subprocess; wall time, peak tree PSS and max single RSS.

    ``env`` is added to this process's environment, or with ``inherit=False`` is the whole
    environment (to leave variables out)."""
    full_env = {**os.environ, **(env or {})} if inherit else dict(env or {})
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=full_env, cwd=cwd)
        sampler = _TreeSampler(proc.pid, interval)
        sampler.start()
        deadline = None if timeout is None else t0 + timeout
        while True:
            # wait4 on this child alone: its rusage is this run's, not every child's so far.
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if deadline is not None and time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        sampler.stop.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    single_mb = usage.ru_maxrss / 1024  # Linux reports KiB
    return Measurement(
        wall_s=wall,
        peak_rss_mb=max(sampler.peak_kb / 1024, 0.0),
        max_single_rss_mb=single_mb,
        rc=proc.returncode,
        stdout=stdout,
        stderr=stderr,
        load=(load0, os.getloadavg()[0]),
        runnable_mean=(sum(sampler.runnable) / len(sampler.runnable)) if sampler.runnable
        else 0.0,
    )


def md_table(headers: list[str], rows: list[list[object]]) -> str:
    """A GitHub markdown table; floats get a sensible number of digits."""

    def fmt(v: object) -> str:
        if isinstance(v, float):
            return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"
        if isinstance(v, int):
            return f"{v:,}"
        return "" if v is None else str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def write_result(topic: str, body: str, *, command: str | None = None,
                 measured: str | None = None) -> Path:
    """Write ``benchmarks/results/<topic>.md``, first line the exact command that made it.

    ``command`` and ``measured`` default to this process's command line and now; a report
    rebuilt later from saved runs passes the measurement's own.
    """
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{topic}.md"
    stamp = measured or time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    path.write_text(f"Command: `{command or command_line()}`\n\nMeasured {stamp}.\n\n"
                    f"{body.rstrip()}\n")
    return path
