"""`cleanpipe check` of 1,000 t0 rows from a fresh install with empty caches vs warm.

A fresh install is a copy of the package as ``make setup`` leaves it (the numba kernels
compiled ahead of time included, :mod:`cleanpipe.precompiled`) in a temporary folder, made
read-only (as a system package or container image is), with no ``__pycache__`` and an empty
per-user cache (``HOME`` and ``XDG_CACHE_HOME`` pointed at a new empty folder): any kernel
the run needs that has no usable ahead-of-time twin is JIT-compiled. Warm is the same
command again with that cache as the previous warm run left it. Runs are
interleaved (cold, warm, cold, warm, ...), each cold one with a new empty cache; median
and spread per kind, and the load average before each run.

Run from the repo root: .venv/bin/python benchmarks/bench_cold_start.py [--runs 3]
Target (#18): cold <= 1.5x warm.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASET, REPO, RESULTS, command_line, measure, require_data

sys.path.insert(0, str(REPO / "tests"))
from read_only_install import read_only_copy

from cleanpipe import precompiled

ROWS = 1000
PIPELINE = "sft_prompt_completion.yaml"


def _input(folder: Path) -> Path:
    """The first ROWS t0 records (shards in name order) as one JSONL file."""
    out = folder / "t0_1000.jsonl"
    lines: list[str] = []
    for f in sorted((require_data(DATASET) / "data_per_template").glob("*.jsonl")):
        lines += [ln for ln in f.read_text(encoding="utf-8").splitlines() if ln.strip()]
        if len(lines) >= ROWS:
            break
    out.write_text("\n".join(lines[:ROWS]) + "\n", encoding="utf-8")
    return out


def _run(site: Path, home: Path, data: Path, report: Path) -> tuple[float, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(PYTHONPATH=str(site), HOME=str(home), XDG_CACHE_HOME=str(home / "xdg"),
               PYTHONDONTWRITEBYTECODE="1")
    shutil.rmtree(report, ignore_errors=True)
    cmd = [sys.executable, "-m", "cleanpipe.cli", "check", str(site / "cleanpipe" / "pipelines"
                                                              / PIPELINE),
           "--input", str(data), "--no-progress", "--quiet", "--report-dir", str(report)]
    load = os.getloadavg()[0]
    m = measure(cmd, env=env, cwd=home, timeout=900)
    if m.rc not in (0, 1):  # pass or gate failed are verdicts; anything else is an error
        sys.exit(f"check failed (rc {m.rc}): {m.stderr[-2000:]}")
    return m.wall_s, load


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp:
        root = Path(tmp)
        data, site = _input(root), read_only_copy(root)
        warm_home = root / "warm"
        warm_home.mkdir()
        _run(site, warm_home, data, root / "r")  # fills the warm cache
        cold, warm, loads = [], [], []
        for i in range(args.runs):
            home = root / f"cold{i}"
            home.mkdir()
            w, ld = _run(site, home, data, root / "r")
            cold.append(w)
            loads.append(ld)
            w, ld = _run(site, warm_home, data, root / "r")
            warm.append(w)
            loads.append(ld)
    c, w = statistics.median(cold), statistics.median(warm)
    twins = bool(precompiled.load_twins())
    lines = [
        f"Command: `{command_line()}`", "",
        f"`cleanpipe check` with the shipped `{PIPELINE}` on the first {ROWS:,} t0 records"
        " (one JSONL file), from a read-only copy of the package"
        f" ({'with' if twins else 'WITHOUT'} the ahead-of-time kernels of `make setup`);"
        " cold = empty per-user caches, warm = the caches its previous run left. "
        f"{args.runs} interleaved runs of each; load average (1 min) before the runs: "
        + ", ".join(f"{x:.1f}" for x in loads) + " on 2 cores.", "",
        "| run | median wall | min | max |", "|---|---|---|---|",
        f"| cold (empty caches) | {c:.2f} s | {min(cold):.2f} s | {max(cold):.2f} s |",
        f"| warm | {w:.2f} s | {min(warm):.2f} s | {max(warm):.2f} s |", "",
        f"cold / warm = **{c / w:.2f}x** (target <= 1.5x:"
        f" {'holds' if c <= 1.5 * w else 'MISSED'}).",
    ]
    out = "\n".join(lines) + "\n"
    print(out)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cold_start.md").write_text(out, encoding="utf-8")


if __name__ == "__main__":
    main()
