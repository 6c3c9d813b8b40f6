"""context_length (Qwen3, format-string or chat template) on t0: a baseline commit vs this tree.

Both versions of cleanpipe run in the same benchmark, alternately (baseline, this tree,
baseline, ...), each in a fresh process that loads the corpus, then times only the stage
(``ContextLength.process`` over every batch) at each ``max_length``. The baseline is
``git archive`` of ``--baseline`` (default ``main``) unpacked into a temporary folder. The
records found too long, and their counts, must be the same in every run of both versions.

Run from the repo root: .venv/bin/python benchmarks/bench_context_length.py [--runs 3]
[--template chat --baseline REV]. ``--template chat`` renders each record through the
tokenizer's own chat template (prompt as the user turn, completion as the assistant's), as
the default SFT pipeline does, and writes ``results/context_length_chat.md``.
Data: $CLEANPIPE_REALDATA or ../shared/data. Target (#18): >= 2x the baseline's throughput.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASET, REPO, RESULTS, command_line, require_data

LIMITS = (2048, 4096)
BATCH = 8192
TEMPLATE = "{prompt}{completion}"

# Runs in the measured tree (PYTHONPATH): the stage time over the corpus per limit.
_MEASURE = r"""
import hashlib, json, sys, time
from pathlib import Path
import pyarrow as pa, pyarrow.json as pj
try:
    from cleanpipe.contract.stage import BatchContext
except ImportError:  # a baseline from before cleanpipe.contract
    from cleanpipe.stages.base import BatchContext
from cleanpipe.stages.context_length import ContextLength
data, tok, limits, batch, template = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), \
    int(sys.argv[4]), sys.argv[5]
files = sorted((Path(data) / "data_per_template").glob("*.jsonl"))
table = pa.concat_tables(pj.read_json(f) for f in files if f.stat().st_size)
batches = table.combine_chunks().to_batches(max_chunksize=batch)
import cleanpipe
out = {"rows": table.num_rows, "mb": sum(b.nbytes for b in batches) / 1e6,
       "package": str(Path(cleanpipe.__file__).parent)}
for limit in limits:
    if template == "chat":
        stage = ContextLength(tokenizer=tok, max_length=limit, prompt_fields=["prompt"],
                              response_field="completion")
    else:
        stage = ContextLength(tokenizer=tok, max_length=limit, template=template,
                              response_field="completion", append_eos=True)
    stage.setup()
    long_rows, tokenized, start = [], 0, 0
    t0 = time.perf_counter()
    for b in batches:
        res = stage.process(b, BatchContext(b))
        for c in res.findings.chunks:
            det = c.detail if isinstance(c.detail, list) else [c.detail] * c.positions.size
            long_rows += [(start + i, str(d)) for i, d in zip(c.positions.tolist(), det)]
        tokenized += res.metrics["tokenized"]
        start += b.num_rows
    el = time.perf_counter() - t0
    digest = hashlib.sha256(json.dumps(sorted(long_rows)).encode()).hexdigest()
    out[str(limit)] = {"s": el, "too_long": len(long_rows), "tokenized": tokenized,
                       "digest": digest}
print(json.dumps(out))
"""


def _baseline(ref: str, into: Path) -> Path:
    """The package at ``ref``, unpacked into ``into``; returns the folder for PYTHONPATH."""
    blob = subprocess.run(["git", "archive", ref, "cleanpipe"], cwd=REPO, check=True,
                          capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")
    return into


def _measure(tree: Path, data: Path, tok: Path, cwd: Path, template: str) -> dict:
    # ``python -c`` puts the working folder first on sys.path: run from an empty one, so
    # that PYTHONPATH alone decides which cleanpipe is measured.
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run([sys.executable, "-c", _MEASURE, str(data), str(tok),
                           json.dumps(LIMITS), str(BATCH), template], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        sys.exit(f"measuring {tree} failed: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f} s ({min(xs):.1f}–{max(xs):.1f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", default="main", help="git ref of the version to beat")
    ap.add_argument("--template", default=TEMPLATE,
                    help="a format string, or 'chat' for the tokenizer's chat template")
    args = ap.parse_args()
    data = require_data(DATASET)
    tok = require_data("tokenizers", "qwen3")
    base_rev = subprocess.run(["git", "rev-parse", "--short", args.baseline], cwd=REPO,
                              check=True, capture_output=True, text=True).stdout.strip()
    runs: dict[str, list[dict]] = {"baseline": [], "this tree": []}
    loads = []
    with tempfile.TemporaryDirectory(prefix="bench-ctx-") as tmp:
        trees = {"baseline": _baseline(args.baseline, Path(tmp) / "base"), "this tree": REPO}
        empty = Path(tmp) / "cwd"
        empty.mkdir()
        for _ in range(args.runs):
            for name, tree in trees.items():
                loads.append(os.getloadavg()[0])
                got = _measure(tree, data, tok, empty, args.template)
                if Path(got["package"]).parent.resolve() != tree.resolve():
                    sys.exit(f"measured {got['package']}, not {tree}")
                runs[name].append(got)
    first = runs["baseline"][0]
    for name, rs in runs.items():
        for r in rs:
            for limit in LIMITS:
                got, want = r[str(limit)], first[str(limit)]
                if (got["too_long"], got["digest"]) != (want["too_long"], want["digest"]):
                    sys.exit(f"{name}: records too long at {limit} differ from the baseline")
    how = ("Qwen3's chat template (prompt as the user turn, completion as the assistant's)"
           if args.template == "chat" else f"template `{args.template}` + eos")
    lines = [
        f"Command: `{command_line()}`", "",
        f"t0 corpus: {first['rows']:,} records ({first['mb']:.0f} MB in Arrow), Qwen3"
        f" tokenizer, {how}, batches of {BATCH}; stage time of"
        f" `ContextLength.process` over the corpus. Baseline = `{args.baseline}`"
        f" ({base_rev}); {args.runs} interleaved runs of each (fresh process per run),"
        " median (min–max); load average (1 min) before the runs: "
        + ", ".join(f"{x:.1f}" for x in loads) + " on 2 cores.", "",
        "| max_length | baseline | this tree | speed-up | records tokenized (baseline → this"
        " tree) | too long |",
        "|---|---|---|---|---|---|",
    ]
    for limit in LIMITS:
        b = [r[str(limit)]["s"] for r in runs["baseline"]]
        t = [r[str(limit)]["s"] for r in runs["this tree"]]
        lines.append(
            f"| {limit} | {_spread(b)} | {_spread(t)} |"
            f" **{statistics.median(b) / statistics.median(t):.2f}x** |"
            f" {first[str(limit)]['tokenized']:,} → "
            f"{runs['this tree'][0][str(limit)]['tokenized']:,} |"
            f" {first[str(limit)]['too_long']} |")
    lines += ["", "Target (#18): >= 2x the baseline. The records found too long and their"
              " token counts (the findings' details) were checked equal in every run of"
              " both versions."]
    out = "\n".join(lines) + "\n"
    print(out)
    RESULTS.mkdir(exist_ok=True)
    name = "context_length_chat.md" if args.template == "chat" else "context_length.md"
    (RESULTS / name).write_text(out, encoding="utf-8")


if __name__ == "__main__":
    main()
