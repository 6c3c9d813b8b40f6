"""Where cleanpipe's default SFT pipeline spends its time: per-stage seconds and a cProfile
of the hottest stage.

Runs ``benchmarks/pipelines/t0_default.yaml`` in-process with one worker (so the profiler
sees the stages' own code, which otherwise runs in worker processes) on the same corpus as
bench_peers, twice: the first run, unprofiled, gives each stage's seconds from its report
and so the hottest stage; the second profiles only the calls into that stage (its
``transform``/``process``/``prepare``/``observe``/``finalize``/``decide``), so start-up,
reading and the other stages stay out of its table. The top functions by own and by
cumulative time are recorded. ``benchmarks/profile_actions.md`` (hand-written: what was
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


#: the methods through which the engine calls a stage's own code
STAGE_METHODS = ("transform", "process", "prepare", "observe", "finalize", "decide")


class StageProfiler:
    """Profiles only while a call into one stage class is running (re-entrant calls, like
    ``prepare`` calling ``sketch``, are counted once)."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.prof = cProfile.Profile()
        self.depth = 0
        self.saved: dict[str, object] = {}

    def _wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*a: Any, **k: Any) -> Any:
            self.depth += 1
            if self.depth == 1:
                self.prof.enable()
            try:
                return fn(*a, **k)
            finally:
                if self.depth == 1:
                    self.prof.disable()
                self.depth -= 1
        return wrapped

    def __enter__(self) -> StageProfiler:
        for name in STAGE_METHODS:
            fn = getattr(self.cls, name, None)
            if fn is not None:
                self.saved[name] = self.cls.__dict__.get(name)
                setattr(self.cls, name, self._wrap(fn))
        return self

    def __exit__(self, *exc: object) -> None:
        for name, orig in self.saved.items():
            if orig is None:
                delattr(self.cls, name)
            else:
                setattr(self.cls, name, orig)


def stage_seconds(report: dict[str, Any]) -> list[list[Any]]:
    """[stage, seconds] from a run's report, slowest first."""
    rows = []
    for s in report.get("stages", []):
        secs = s.get("seconds") or s.get("timing", {}).get("seconds") or 0.0
        rows.append([s.get("name") or s.get("stage"), float(secs)])
    rows.sort(key=lambda r: -r[1])
    return rows


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
    t0 = time.perf_counter()
    report = cleanpipe.Pipeline.from_yaml(pipe).run(str(inp), str(out), overwrite=True,
                                                     workers=1)
    wall = time.perf_counter() - t0
    stage_rows = [[name, secs, 100 * secs / wall if wall else 0.0]
                  for name, secs in stage_seconds(report)]
    hottest = stage_rows[0][0] if stage_rows else None

    from cleanpipe.stages.registry import get_stage_class

    body = [
        f"Input: `{inp}` — {report['totals']['read']:,} records, one worker, in-process."
        f" Wall time {wall:.1f} s (one process: compare stages with each other, not with"
        " bench_peers' figures, which use 2 workers).",
        "",
        "## Seconds per stage (from the run's report)",
        "",
        md_table(["stage", "seconds", "% of wall"], stage_rows) if stage_rows else "(none)",
        "",
    ]
    cls = get_stage_class(hottest) if hottest else None
    if cls is not None:
        shutil.rmtree(out, ignore_errors=True)
        with StageProfiler(cls) as sp:
            cleanpipe.Pipeline.from_yaml(pipe).run(str(inp), str(out), overwrite=True,
                                                   workers=1)
        stats = pstats.Stats(sp.prof, stream=io.StringIO())
        body += [
            f"Hottest stage: **{hottest}**; a second run profiled only the calls into it"
            f" ({stats.total_tt:.1f} s of profiled time; cProfile slows Python-level code"
            " more than compiled kernels).",
            "",
            f"## {hottest}: top {args.top} functions by own time",
            "",
            top_table(stats, "tottime", args.top),
            "",
            f"## {hottest}: top {args.top} functions by cumulative time",
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
