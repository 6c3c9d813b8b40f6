"""One big JSONL file against the same rows in shards (issues 18 item 1, 17 item 6).

1. t0 (55,185 prompt/completion records, 294 shards) written as ONE JSONL file, as 64
   shards and as 294 (its own count: ~190 rows a file); ``unicode_fix`` + ``minhash_dedup``
   on each with 2 workers, runs interleaved (one file, 64 shards, 294 shards, one file,
   ...). Wall and peak PSS of the process tree: median and spread; acceptance: one file
   <= 1.15x the 64 shards on both.
2. A ~500 MB JSONL file (t0's rows repeated with distinct ids) against the same rows in 20
   shards, read through the engine with no stage (no output written): peak memory,
   acceptance <= 1.2x. The big files are deleted afterwards.

Every run is its own subprocess (benchmarks/_common.measure); the load average before and
after each run is recorded, as the machine may be shared.

    python benchmarks/bench_one_file.py [--runs 3] [--big-runs 2] [--big-mb 500]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, RESULTS, WORK, Measurement, command_line, md_table, measure

WORKDIR = WORK / "one_file"
PIPELINE = """name: one-file-bench
fields: [prompt, completion]
stages:
  - stage: unicode_fix
  - stage: minhash_dedup
"""
READ_ONLY = """name: read-bench
fields: [prompt, completion]
stages: []
"""
RUN_NO_OUTPUT = ("import sys; from cleanpipe import Pipeline; "
                 "r = Pipeline.from_yaml(sys.argv[1]).run(sys.argv[2], workers=2); "
                 "print(r['totals']['read'])")


def _t0_lines() -> list[bytes]:
    root = Path(os.environ.get("CLEANPIPE_REALDATA", REPO.parent / "shared" / "data"))
    if not root.is_dir():
        root = REPO.parent.parent / "shared" / "data"
    shards = sorted((root / "sft_self_instruct_t0_50k" / "data_per_template").glob("*.jsonl"))
    if not shards:
        sys.exit(f"t0 not found under {root}: set CLEANPIPE_REALDATA")
    lines: list[bytes] = []
    for s in shards:
        lines += [ln for ln in s.read_bytes().split(b"\n") if ln.strip()]
    return lines


def _write_one(path: Path, lines: list[bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        for ln in lines:
            fh.write(ln + b"\n")
    return path


def _write_shards(folder: Path, lines: list[bytes], n: int) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    step = -(-len(lines) // n)
    for k in range(n):
        _write_one(folder / f"part-{k:03d}.jsonl", lines[k * step:(k + 1) * step])
    return folder


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run_pipeline(pipe: Path, src: Path, out: Path) -> Measurement:
    shutil.rmtree(out, ignore_errors=True)
    m = measure([sys.executable, "-m", "cleanpipe.cli", "run", str(pipe), "--input", str(src),
                 "-o", str(out), "--workers", "2", "-q", "--no-progress"], env=_env())
    if m.rc not in (0, 1):
        sys.exit(f"run failed ({m.rc}): {m.stderr[-2000:]}")
    return m


def _read(pipe: Path, src: Path) -> Measurement:
    m = measure([sys.executable, "-c", RUN_NO_OUTPUT, str(pipe), str(src)], env=_env())
    if m.rc != 0:
        sys.exit(f"read failed ({m.rc}): {m.stderr[-2000:]}")
    return m


def _summary(ms: list[Measurement], what: str) -> tuple[float, str]:
    vals = [getattr(m, what) for m in ms]
    med = statistics.median(vals)
    return med, f"{med:,.1f} ({min(vals):,.1f}-{max(vals):,.1f})"


def _rows(cases: dict[str, list[Measurement]], base: str) -> tuple[list[list[object]],
                                                                  dict[str, float]]:
    rows: list[list[object]] = []
    ratios: dict[str, float] = {}
    bw, _ = _summary(cases[base], "wall_s")
    bp, _ = _summary(cases[base], "peak_rss_mb")
    for name, ms in cases.items():
        w, ws = _summary(ms, "wall_s")
        p, ps = _summary(ms, "peak_rss_mb")
        _, ss = _summary(ms, "max_single_rss_mb")
        loads = ", ".join(f"{m.load[0]:.1f}->{m.load[1]:.1f}" for m in ms)
        rows.append([name, len(ms), ws, f"{w / bw:.2f}x", ps, f"{p / bp:.2f}x", ss, loads])
        ratios[name] = max(w / bw, 0)
        ratios[name + " pss"] = p / bp
    return rows, ratios


HEAD = ["input", "runs", "wall s, median (min-max)", "wall vs shards",
        "peak PSS MB, median (min-max)", "PSS vs shards", "largest process RSS MB",
        "load average before->after each run"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--big-runs", type=int, default=2)
    ap.add_argument("--big-mb", type=int, default=500)
    ap.add_argument("--skip-big", action="store_true")
    args = ap.parse_args()
    lines = _t0_lines()
    one = _write_one(WORKDIR / "t0_one" / "t0.jsonl", lines)
    shards = _write_shards(WORKDIR / "t0_64", lines, 64)
    many = _write_shards(WORKDIR / "t0_294", lines, 294)
    pipe = WORKDIR / "pipeline.yaml"
    pipe.write_text(PIPELINE)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    cases: dict[str, list[Measurement]] = {"t0 as 64 JSONL shards": [],
                                            "t0 as one JSONL file": [],
                                            "t0 as 294 JSONL shards": []}
    for _ in range(args.runs):
        cases["t0 as one JSONL file"].append(_run_pipeline(pipe, one, WORKDIR / "out_one"))
        cases["t0 as 64 JSONL shards"].append(_run_pipeline(pipe, shards, WORKDIR / "out_64"))
        cases["t0 as 294 JSONL shards"].append(_run_pipeline(pipe, many, WORKDIR / "out_294"))
    same = _same_data(WORKDIR / "out_one", WORKDIR / "out_64")
    same_294 = _same_data(WORKDIR / "out_one", WORKDIR / "out_294")
    t0_rows, t0_ratio = _rows(cases, "t0 as 64 JSONL shards")

    big_rows: list[list[object]] = []
    big_ratio: dict[str, float] = {}
    big_note = "skipped (--skip-big)"
    if not args.skip_big:
        copies = max(1, round(args.big_mb * 1e6 / one.stat().st_size))
        big_lines = [_with_id(ln, c, i) for c in range(copies) for i, ln in enumerate(lines)]
        big = _write_one(WORKDIR / "big_one" / "big.jsonl", big_lines)
        big_shards = _write_shards(WORKDIR / "big_20", big_lines, 20)
        size_mb = big.stat().st_size / 1e6
        n_rows = len(big_lines)
        del big_lines
        read_pipe = WORKDIR / "read.yaml"
        read_pipe.write_text(READ_ONLY)
        big_cases: dict[str, list[Measurement]] = {"20 shards": [], "one file": []}
        for _ in range(args.big_runs):
            big_cases["one file"].append(_read(read_pipe, big))
            big_cases["20 shards"].append(_read(read_pipe, big_shards))
        big_rows, big_ratio = _rows(big_cases, "20 shards")
        big_note = (f"{size_mb:,.0f} MB, {n_rows:,} rows ({copies} copies of t0, ids"
                    " distinct), read through the engine with no stage and no output,"
                    " 2 workers")
        shutil.rmtree(WORKDIR / "big_one", ignore_errors=True)
        shutil.rmtree(WORKDIR / "big_20", ignore_errors=True)

    text = [f"`{command_line()}`", "",
            f"Started {started}; {os.cpu_count()} cores, shared with other jobs (load"
            " averages per run below).", "",
            "### t0 as one JSONL file against the same rows as 64 and 294 shards", "",
            f"`unicode_fix` + `minhash_dedup`, 2 workers, {len(lines):,} records, runs"
            f" interleaved. Kept data identical to the one file's: 64 shards {same}, 294"
            f" shards {same_294}.", "",
            md_table(HEAD, t0_rows), "",
            f"Acceptance (#18): wall <= 1.15x: {t0_ratio['t0 as one JSONL file']:.2f}x;"
            f" peak PSS <= 1.15x: {t0_ratio['t0 as one JSONL file pss']:.2f}x.", "",
            f"### A {args.big_mb} MB JSONL file against the same rows in 20 shards", "",
            big_note, ""]
    if big_rows:
        big_head = [*HEAD[:2], "wall s", "wall vs shards", "peak PSS MB", "PSS vs shards",
                    "largest process RSS MB", "load average before->after each run"]
        text += [md_table(big_head, big_rows), "",
                 f"Acceptance (#17): peak memory <= 1.2x: {big_ratio['one file pss']:.2f}x"
                 " (PSS of the tree).", ""]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "one_file.md").write_text("\n".join(text))
    print("\n".join(text))


def _with_id(line: bytes, copy: int, i: int) -> bytes:
    rec = json.loads(line)
    return json.dumps({"id": f"c{copy}-{i}", **rec}, ensure_ascii=False).encode()


def _same_data(a: Path, b: Path) -> str:
    import pyarrow.parquet as pq

    ta = pq.read_table(sorted((a / "data").glob("*.parquet")))
    tb = pq.read_table(sorted((b / "data").glob("*.parquet")))
    return "yes" if ta.equals(tb) else f"NO ({ta.num_rows} vs {tb.num_rows} rows)"


if __name__ == "__main__":
    main()
