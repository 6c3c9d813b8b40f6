"""Engine benchmarks (issue 2): streaming memory and pass-through overhead.

1. Memory: a stateless pipeline over the t0 corpus and over a 10x larger copy of it; peak
   RSS of the two runs must differ by less than 30%.
2. Overhead: JSONL shards -> Parquet through cleanpipe with no stages, against plain pyarrow
   reading the same files and writing Parquet, in the same run; cleanpipe must reach >= 0.7x
   the plain throughput.

Each measured run is its own subprocess, so peak RSS is that run's alone.

    .venv/bin/python benchmarks/bench_engine.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("CLEANPIPE_REALDATA", REPO.parent / "shared" / "data"))
T0 = DATA / "sft_self_instruct_t0_50k" / "data_per_template"
RESULTS = REPO / "benchmarks" / "results" / "engine.md"
WORK = REPO / "benchmarks" / ".work"

STATELESS = """
name: bench-stateless
fields: [prompt, completion]
stages: []
"""

OVERHEAD = r"""
import sys, time, pathlib, pyarrow.json as pj, pyarrow.parquet as pq
from cleanpipe import Pipeline
src, tmp = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])

def plain():
    writer = None
    for f in sorted(src.rglob("*.jsonl")):
        if f.stat().st_size == 0:
            continue
        table = pj.read_json(f)
        if writer is None:
            writer = pq.ParquetWriter(tmp / "plain.parquet", table.schema, compression="zstd")
        writer.write_table(table)
    writer.close()

pipe = Pipeline(stages=[], fields=["prompt", "completion"])
def cleanpipe():
    pipe.run(src, tmp / "cp", overwrite=True, workers=1)

best = {"plain": 1e9, "cleanpipe": 1e9}
cleanpipe()  # warm the imports and the page cache for both
for _ in range(5):  # interleaved, best of 5: the machine is shared and noisy
    for name, fn in (("plain", plain), ("cleanpipe", cleanpipe)):
        t = time.perf_counter(); fn(); best[name] = min(best[name], time.perf_counter() - t)
print(best["plain"], best["cleanpipe"])
"""


def _measure(cmd: list[str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (bytes) of the child, and its stdout."""
    t = time.perf_counter()
    # /usr/bin/time is not guaranteed; wait4 gives the child's own peak RSS
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    out = proc.stdout.read() if proc.stdout else ""
    err = proc.stderr.read() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err}")
    return wall, usage.ru_maxrss * 1024, out


def _copies(n: int) -> Path:
    """n copies of the t0 shards (hard links when possible: same bytes, no disk cost)."""
    target = WORK / f"t0x{n}"
    if target.exists():
        return target
    tmp = WORK / f".t0x{n}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    for i in range(n):
        d = tmp / f"copy{i:02d}"
        d.mkdir(parents=True)
        for f in sorted(T0.glob("*.jsonl")):
            try:
                os.link(f, d / f.name)
            except OSError:
                shutil.copyfile(f, d / f.name)
    tmp.rename(target)
    return target


def main() -> None:
    if not T0.is_dir():
        raise SystemExit(f"t0 corpus not found at {T0}; set CLEANPIPE_REALDATA")
    WORK.mkdir(parents=True, exist_ok=True)
    cleanpipe = str(Path(sys.executable).parent / "cleanpipe")
    with tempfile.TemporaryDirectory(dir=WORK) as tmpd:
        tmp = Path(tmpd)
        pipe = tmp / "stateless.yaml"
        pipe.write_text(STATELESS)
        rows = []
        for n in (1, 10):
            src = T0 if n == 1 else _copies(n)
            wall, rss, _ = _measure([cleanpipe, "run", str(pipe), "-i", str(src), "-o",
                                     str(tmp / f"out{n}"), "--overwrite", "-q"])
            rep = json.loads((tmp / f"out{n}" / "report.json").read_text())
            rows.append((n, rep["totals"]["read"], wall, rss))
        script = tmp / "overhead.py"
        script.write_text(OVERHEAD)
        _, _, out = _measure([sys.executable, str(script), str(T0), str(tmp)])
        plain, cp = (float(x) for x in out.split())
    size = sum(f.stat().st_size for f in T0.glob("*.jsonl"))
    rss_ratio = rows[1][3] / rows[0][3]
    lines = [
        "# Engine: streaming memory and pass-through overhead",
        "",
        "Command: `.venv/bin/python benchmarks/bench_engine.py`",
        "",
        "## Peak RSS, stateless pipeline (no stages), t0 corpus vs 10x copy",
        "",
        "| input | rows | wall s | peak RSS MiB |",
        "|---|---:|---:|---:|",
        *[f"| t0 x{n} | {r:,} | {w:.2f} | {m / 2**20:.0f} |" for n, r, w, m in rows],
        "",
        f"Peak RSS ratio 10x / 1x: **{rss_ratio:.2f}** (target: differ by < 30%,"
        f" i.e. < 1.30): {'PASS' if abs(rss_ratio - 1) < 0.30 else 'FAIL'}",
        "",
        "## Pass-through overhead: JSONL shards -> Parquet, one process, interleaved, best of 5",
        "",
        "| tool | wall s | MB/s |",
        "|---|---:|---:|",
        f"| plain pyarrow (read_json + ParquetWriter) | {plain:.2f} | {size / plain / 1e6:.1f} |",
        f"| cleanpipe Pipeline.run, no stages, workers=1 | {cp:.2f} | {size / cp / 1e6:.1f} |",
        "",
        f"Throughput ratio cleanpipe / plain: **{plain / cp:.2f}** (target >= 0.7):"
        f" {'PASS' if plain / cp >= 0.7 else 'FAIL'}",
        "",
        "Both run in one process after a warm-up (imports and page cache), alternating."
        " cleanpipe also computes line numbers, row ids, the input fingerprint, character"
        " histograms, and writes the quarantine, events, dataset card and report.",
    ]
    text = "\n".join(lines) + "\n"
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
