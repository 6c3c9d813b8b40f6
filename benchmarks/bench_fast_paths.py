"""special_tokens and context_length stage time on t0: this checkout vs a baseline revision.

Each measurement runs in its own subprocess: the t0 corpus (every prompt and completion,
~60 MB) in batches of 4096 rows, timing only the stage's own calls (stage time, the corpus
read excluded). ``before`` runs the same measuring code against the package exported from
``--before`` (default: the commit this work started from), ``after`` against this
checkout; the runs are interleaved, and the findings of both must be equal.

* special_tokens: Qwen3's special tokens (strip), over the prompt and completion strings.
* context_length: Qwen3, template ``{prompt}{completion}``, max_length 4096, append_eos
  (the shipped ``sft_prompt_completion`` settings, with a real tokenizer).

Run from the repo root: .venv/bin/python benchmarks/bench_fast_paths.py [--runs 3]
Targets (#18): special_tokens >= 200 MB/s; context_length >= 2x the baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASET, REPO, RESULTS, command_line, require_data

BASELINE = "2826dfc"
BATCH = 4096

_MEASURE = r"""
import hashlib, json, sys, time
from pathlib import Path
import pyarrow as pa, pyarrow.compute as pc, pyarrow.json as pj
from cleanpipe.contract.stage import BatchContext
from cleanpipe.stages.context_length import ContextLength
from cleanpipe.stages.special_tokens import SpecialTokens
data, tok = Path(sys.argv[1]), sys.argv[2]
files = sorted((data / "data_per_template").glob("*.jsonl"))
table = pa.concat_tables(pj.read_json(f) for f in files if f.stat().st_size).combine_chunks()
batches = table.to_batches(max_chunksize=int(sys.argv[3]))
out = {}
st = SpecialTokens(tokenizer=tok)
st.setup()
# One untimed call on a few rows: lazy imports and first-call costs are paid once per
# process, not per megabyte.
st.transform(batches[0].column("completion").slice(0, 16))
mb, el, hits = 0.0, 0.0, []
for b in batches:
    for col in ("prompt", "completion"):
        arr = b.column(col)
        mb += pc.sum(pc.binary_length(arr)).as_py() / 1e6
        t = time.perf_counter()
        res = st.transform(arr)
        el += time.perf_counter() - t
        hits.append([res.findings.count(), [c.detail for c in res.findings.chunks],
                     res.texts.to_pylist()])
digest = hashlib.sha256(json.dumps(hits).encode()).hexdigest()
out["special_tokens"] = {"s": el, "mb": mb, "findings": sum(h[0] for h in hits),
                         "digest": digest}
cl = ContextLength(tokenizer=tok, max_length=4096, template="{prompt}{completion}",
                   response_field="completion", append_eos=True)
cl.setup()
cl.process(batches[0].slice(0, 16), BatchContext(batches[0].slice(0, 16)))
el, long_rows = 0.0, []
for i, b in enumerate(batches):
    t = time.perf_counter()
    res = cl.process(b, BatchContext(b))
    el += time.perf_counter() - t
    long_rows.append([i, res.findings.positions().tolist(),
                      [c.detail for c in res.findings.chunks]])
digest = hashlib.sha256(json.dumps(long_rows).encode()).hexdigest()
out["context_length"] = {"s": el, "mb": mb, "findings": sum(len(r[1]) for r in long_rows),
                         "digest": digest}
print(json.dumps(out))
"""


def _export(rev: str, folder: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "cleanpipe"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def _measure(site: Path, data: Path, tok: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(site)}
    cmd = [sys.executable, "-c", _MEASURE, str(data), str(tok), str(BATCH)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        sys.exit(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--before", default=BASELINE, help="baseline git revision")
    args = ap.parse_args()
    data = require_data(DATASET)
    tok = require_data("tokenizers", "qwen3")
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    loads = []
    with tempfile.TemporaryDirectory(prefix="bench-fast-") as tmp:
        sites = {"before": _export(args.before, Path(tmp)), "after": REPO}
        for _ in range(args.runs):
            for kind in ("before", "after"):
                loads.append(os.getloadavg()[0])
                runs[kind].append(_measure(sites[kind], data, tok))
    lines = [f"Command: `{command_line()}`", "",
             f"t0 corpus, every prompt and completion, batches of {BATCH} rows; stage time"
             f" (the stage's own calls, in process), median of {args.runs} interleaved runs"
             f" (min-max); before = `{args.before}`, after = this checkout. Load average"
             " (1 min) before each run: " + ", ".join(f"{x:.1f}" for x in loads)
             + " on 2 cores.", "",
             "| stage | before | after | speed-up | after throughput | findings equal |",
             "|---|---|---|---|---|---|"]
    for stage in ("special_tokens", "context_length"):
        b = [r[stage]["s"] for r in runs["before"]]
        a = [r[stage]["s"] for r in runs["after"]]
        mb = runs["after"][0][stage]["mb"]
        same = {(r[stage]["findings"], r[stage]["digest"]) for k in runs for r in runs[k]}
        mb_b, mb_a = statistics.median(b), statistics.median(a)
        lines.append(f"| {stage} | {mb_b:.2f} s ({min(b):.2f}-{max(b):.2f}) | {mb_a:.2f} s"
                     f" ({min(a):.2f}-{max(a):.2f}) | **{mb_b / mb_a:.1f}x** |"
                     f" {mb / mb_a:.0f} MB/s | {len(same) == 1}"
                     f" ({runs['after'][0][stage]['findings']:,}) |")
    lines += ["", "Targets: special_tokens >= 200 MB/s of stage time; context_length >= 2x"
              " the baseline, with the same findings (too-long rows and their counts)."]
    out = "\n".join(lines) + "\n"
    print(out)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "fast_paths.md").write_text(out, encoding="utf-8")


if __name__ == "__main__":
    main()
