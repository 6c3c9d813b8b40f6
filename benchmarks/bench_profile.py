"""Where cleanpipe's default SFT pipeline spends its time: per-stage seconds and a cProfile.

Runs ``benchmarks/pipelines/t0_default.yaml`` in-process with one worker (so the profiler
sees the stages' own code, which otherwise runs in worker processes) on the same corpus as
bench_peers, reads each stage's seconds from the run's report, and records the top functions
by own time and by cumulative time. ``benchmarks/profile_actions.md`` (hand-written: what was
done about each hotspot) is appended to the results.

Usage::

    .venv/bin/python benchmarks/bench_profile.py [--shards N] [--top 25]

    >>> short("/x/site-packages/ftfy/fixes.py", 12, "fix_encoding")
    'ftfy/fixes.py:12(fix_encoding)'
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import BENCH, DATASET, WORK, md_table, require_data, write_result


def short(path: str, line: int, func: str) -> str:
    """A function's location without the install prefix."""
    for marker in ("site-packages/", "/cleanpipe/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            if marker == "/cleanpipe/":
                path = "cleanpipe/" + path
            break
    return f"{path}:{line}({func})"


def top_table(stats: pstats.Stats, key: str, n: int) -> str:
    stats.sort_stats(key)
    rows = []
    for func in stats.fcn_list[:n]:  # type: ignore[attr-defined]
        _cc, nc, tt, ct, _ = stats.stats[func]  # type: ignore[attr-defined]
        rows.append([short(*func), nc, tt, ct])
    return md_table(["function", "calls", "own s", "cumulative s"], rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", type=int, default=0, help="deterministic subset (0 = all)")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    data = require_data()
    src = require_data(DATASET, "data_per_template")

    from bench_peers import cleanpipe_pipeline, select_input

    import cleanpipe

    work = WORK / "profile"
    pipe, missing, notes = cleanpipe_pipeline(data, work / "pipeline.yaml")
    header = "# Profile: cleanpipe's t0_default pipeline, one worker, in-process\n\n"
    if pipe is None:
        write_result("profile", header + "Not measured: " + "; ".join(notes))
        return
    inp = select_input(src, args.shards)
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    report = cleanpipe.Pipeline.from_yaml(pipe).run(str(inp), str(out), overwrite=True,
                                                     workers=1)
    prof.disable()
    wall = time.perf_counter() - t0

    stage_rows = []
    for s in report.get("stages", []):
        secs = s.get("seconds") or s.get("timing", {}).get("seconds") or 0.0
        stage_rows.append([s.get("name") or s.get("stage"), float(secs),
                           100 * float(secs) / wall if wall else 0.0])
    stage_rows.sort(key=lambda r: -r[1])
    hottest = stage_rows[0][0] if stage_rows else None

    stats = pstats.Stats(prof, stream=io.StringIO())
    body = [
        f"Input: `{inp}` — {report['totals']['read']:,} records. Wall time under the profiler"
        f" {wall:.1f} s (cProfile slows Python-heavy code; compare stages with each other,"
        " not with bench_peers' figures).",
        "",
        "## Seconds per stage (from the run's report)",
        "",
        md_table(["stage", "seconds", "% of wall"], stage_rows) if stage_rows else "(none)",
        "",
        f"Hottest stage: **{hottest}**." if hottest else "",
        "",
        f"## Top {args.top} functions by own time",
        "",
        top_table(stats, "tottime", args.top),
        "",
        f"## Top {args.top} functions by cumulative time",
        "",
        top_table(stats, "cumulative", args.top),
    ]
    if missing:
        body += ["", f"**Ran without these stages (not landed yet): {', '.join(missing)}**"]
    body += [f"- {n}" for n in notes]
    actions = BENCH / "profile_actions.md"
    if actions.exists():
        body += ["", actions.read_text().strip()]
    text = "\n".join(body)
    print(text)
    write_result("profile", header + text)


if __name__ == "__main__":
    main()
