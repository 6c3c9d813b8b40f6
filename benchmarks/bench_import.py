"""What importing cleanpipe costs: ``from cleanpipe.stages import Whitespace`` (the form the
README shows) against ``import pyarrow.compute, ftfy`` (what any text stage needs anyway).

Each import runs in a fresh interpreter (``python -c``) and times the import statement alone,
interpreter start-up excluded; runs are interleaved (baseline, cleanpipe, ..., baseline, ...)
so that load on a shared machine hits every case alike; each figure is the median and
min–max, of wall time and of the process's CPU time (which other work on a shared machine
disturbs less). One warm-up round first writes the bytecode caches and is not counted. The heaviest
modules of one ``python -X importtime`` run of the stage import follow.

Run from the repo root: .venv/bin/python benchmarks/bench_import.py [--runs 7]
Target (#16): the stage import takes at most 1.5x the baseline.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, command_line, md_table, write_result
from _repeats import Spread, interleaved

BASELINE = "import pyarrow.compute, ftfy"
CASES = {
    "baseline": BASELINE,
    "stage": "from cleanpipe.stages import Whitespace",
    "package": "import cleanpipe",
    "ftfy stage": "from cleanpipe.stages import UnicodeFix",
}
TARGET = 1.5
#: libraries one text stage must not pull in (tests/test_lazy_imports.py asserts it)
HEAVY = ("numba", "tokenizers", "polars", "datasets", "cleanpipe.dedup")

_TIMED = """
import sys, time
t, c = time.perf_counter(), time.process_time()
{statement}
took, cpu = time.perf_counter() - t, time.process_time() - c
heavy = [m for m in {heavy!r} if m in sys.modules]
print(took, cpu, ",".join(heavy))
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    return env


def time_import(statement: str) -> tuple[float, float, str]:
    """Seconds the import statement took in a fresh interpreter (wall and CPU), and the
    heavy modules it loaded."""
    out = subprocess.run([sys.executable, "-c", _TIMED.format(statement=statement,
                                                               heavy=HEAVY)],
                         capture_output=True, text=True, env=_env(), cwd=REPO, check=True)
    took, cpu, heavy = [*out.stdout.strip().split(" "), ""][:3]
    return float(took), float(cpu), heavy


def heaviest(statement: str, n: int = 12) -> list[list[object]]:
    """The ``n`` modules with the largest cumulative import time in one run."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", statement],
                         capture_output=True, text=True, env=_env(), cwd=REPO, check=True)
    rows = []
    for line in out.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        own, total, name = (p.strip() for p in line.removeprefix("import time:").split("|"))
        rows.append((int(total), int(own), name))
    rows.sort(reverse=True)
    return [[f"`{name}`", f"{total / 1e3:.0f}", f"{own / 1e3:.0f}"]
            for total, own, name in rows[:n]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    for statement in CASES.values():  # bytecode caches written, not counted
        time_import(statement)
    times: dict[str, list[float]] = {k: [] for k in CASES}
    cpus: dict[str, list[float]] = {k: [] for k in CASES}
    heavy: dict[str, set[str]] = {k: set() for k in CASES}
    loads = []
    for _, case in interleaved(list(CASES), args.runs):
        loads.append(os.getloadavg()[0])
        took, cpu, loaded = time_import(CASES[case])
        times[case].append(took)
        cpus[case].append(cpu)
        heavy[case].update(filter(None, loaded.split(",")))
    spread = {k: Spread.of(v) for k, v in times.items()}
    cpu = {k: Spread.of(v) for k, v in cpus.items()}
    base, cpu_base = spread["baseline"].median, cpu["baseline"].median
    rows = [[f"`{CASES[k]}`", s.fmt("{:.3f}"), f"{s.median / base:.2f}x",
             cpu[k].fmt("{:.3f}"), f"{cpu[k].median / cpu_base:.2f}x",
             ", ".join(sorted(heavy[k])) or "none"] for k, s in spread.items()]
    ratio = spread["stage"].median / base
    cpu_ratio = cpu["stage"].median / cpu_base
    verdict = "met" if ratio <= TARGET else "MISSED"
    body = "\n".join([
        f"Each import in a fresh interpreter, the statement alone timed (start-up excluded);"
        f" {args.runs} interleaved runs of each after one warm-up round; median (min–max)"
        f" seconds. Load average (1 min) during the runs: {min(loads):.1f}–{max(loads):.1f}"
        f" on {os.cpu_count()} cores.",
        "",
        md_table(["import", "wall s", "vs baseline", "CPU s", "vs baseline",
                  f"loaded of {', '.join(HEAVY)}"], rows),
        "",
        f"`{CASES['stage']}` / `{BASELINE}` = **{ratio:.2f}x** wall (target <= {TARGET}x:"
        f" {verdict}), {cpu_ratio:.2f}x CPU time (less sensitive to other work on a shared"
        " machine).",
        "",
        f"### Heaviest modules of `{CASES['stage']}` (one `python -X importtime` run, ms)",
        "",
        md_table(["module", "cumulative", "own"], heaviest(CASES["stage"])),
    ])
    print(body)
    write_result("import", body, command=command_line())


if __name__ == "__main__":
    main()
