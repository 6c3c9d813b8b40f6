"""What ``make bench`` runs: every ``benchmarks/bench_*.py``, then ``benchmarks/RESULTS.md``.

Each benchmark runs in its own process and writes ``benchmarks/results/<topic>.md``, whose
first line is the exact command that produced it; RESULTS.md is those files put together
(peers, scaling and profile first, then the rest by name), so every figure in it names its
command. A benchmark that fails does not stop the others: RESULTS.md says which failed.

Usage::

    .venv/bin/python benchmarks/run_all.py [--only peers,scaling] [--assemble-only]

    >>> order(["bench_zeta.py", "bench_profile.py", "bench_peers.py", "bench_alpha.py"])
    ['bench_peers.py', 'bench_profile.py', 'bench_alpha.py', 'bench_zeta.py']
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results"
FIRST = ("peers", "scaling", "profile")


def topic(script: str) -> str:
    return Path(script).stem.removeprefix("bench_")


def order(names: list[str]) -> list[str]:
    """Peers, scaling and profile first (the headline), then the others by name."""
    def key(n: str) -> tuple[int, str]:
        t = topic(n)
        return (FIRST.index(t), t) if t in FIRST else (len(FIRST), t)

    return sorted(names, key=key)


def assemble(failed: dict[str, int]) -> Path:
    parts = [
        "# Benchmark results",
        "",
        "Assembled by `make bench` (`.venv/bin/python benchmarks/run_all.py`) from"
        " `benchmarks/results/*.md`; do not edit by hand. Each section begins with the exact"
        " command that produced its figures; rerun that command to reproduce one section.",
        f"Assembled {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "Which figure is which: `peers` times every tool from the same cache state, giving"
        " cleanpipe **cold** (its numba kernel cache emptied just before the run, as on a"
        " fresh CI runner) and **warm** (cache left by its previous run) figures; its headline"
        " ratios are cold against cold; every cell is the median (min–max) of interleaved"
        " rounds with each run's load average. `dedup` is warm for every method (cleanpipe's"
        " one-off compile is reported apart), hashes compared like for like, medians of"
        " interleaved rounds. The other sections time cleanpipe with its kernels already"
        " cached by earlier runs (warm) and use one run or the best of several, as each says.",
    ]
    if failed:
        parts += ["", "**Failed in this run** (their sections below are from an earlier run, if"
                  " any): " + ", ".join(f"`bench_{t}.py` (exit {rc})" for t, rc in failed.items())]
    files = order([f"bench_{p.stem}.py" for p in RESULTS.glob("*.md")])
    for name in files:
        text = (RESULTS / f"{topic(name)}.md").read_text().strip()
        # Each results file's own headings move one level down under RESULTS.md's title.
        text = "\n".join("#" + ln if ln.startswith("#") else ln for ln in text.splitlines())
        parts += ["", f"## {topic(name)}", "", text]
    out = BENCH / "RESULTS.md"
    out.write_text("\n".join(parts) + "\n")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="comma-separated topics (peers,scaling,...)")
    ap.add_argument("--assemble-only", action="store_true")
    args = ap.parse_args()
    scripts = order([p.name for p in BENCH.glob("bench_*.py")])
    if args.only:
        wanted = set(args.only.split(","))
        scripts = [s for s in scripts if topic(s) in wanted]
    failed: dict[str, int] = {}
    if not args.assemble_only:
        for s in scripts:
            print(f"\n######## {s}", flush=True)
            t0 = time.perf_counter()
            rc = subprocess.call([sys.executable, str(BENCH / s)], cwd=REPO)
            print(f"######## {s}: exit {rc} after {time.perf_counter() - t0:.0f} s", flush=True)
            if rc != 0:
                failed[topic(s)] = rc
    out = assemble(failed)
    print(f"\nwrote {out.relative_to(REPO)}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
