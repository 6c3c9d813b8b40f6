"""context_length (Qwen3) on the t0 corpus vs. encode_batch over every record, same run.

Run from the repo root: .venv/bin/python benchmarks/bench_context_length.py
Data: $CLEANPIPE_REALDATA or ../shared/data.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from guard_data import read_t0  # noqa: E402

from cleanpipe.contract.stage import BatchContext  # noqa: E402
from cleanpipe.stages.context_length import ContextLength  # noqa: E402

DATA = Path(os.environ.get("CLEANPIPE_REALDATA", REPO.parent / "shared" / "data"))
BATCH = 8192


def main() -> None:
    table = read_t0(DATA / "sft_self_instruct_t0_50k")
    tok = str(DATA / "tokenizers" / "qwen3")
    batches = table.combine_chunks().to_batches(max_chunksize=BATCH)
    rows = []
    ref_stage = ContextLength(tokenizer=tok, max_length=1, template="{prompt}{completion}",
                              response_field="completion")
    ref_stage.setup()
    raw = ref_stage.tok.tokenizer
    t0 = time.perf_counter()
    full_counts = []
    for b in batches:
        rendered = ref_stage.render(b).texts.to_pylist()
        full_counts += [len(e.ids) for e in raw.encode_batch(rendered)]
    ref = time.perf_counter() - t0
    full = np.asarray(full_counts)
    for limit in (2048, 4096):
        stage = ContextLength(tokenizer=tok, max_length=limit, template="{prompt}{completion}",
                              response_field="completion")
        stage.setup()  # fresh process-level cache per limit
        t1 = time.perf_counter()
        flagged = 0
        tokenized = 0
        for b in batches:
            res = stage.process(b, BatchContext(b))
            flagged += res.findings.count("too_long")
            tokenized += res.metrics["tokenized"]
        el = time.perf_counter() - t1
        assert flagged == int((full > limit).sum()), "counts disagree with full encoding"
        rows.append((limit, ref, el, ref / el, tokenized, flagged))
    cmd = "CLEANPIPE_REALDATA=/work/shared/data .venv/bin/python benchmarks/bench_context_length.py"
    lines = [
        f"`{cmd}`", "",
        f"t0 corpus: {table.num_rows} records, Qwen3 tokenizer, template "
        "`{prompt}{completion}`, batches of 8192, 2 cores.", "",
        "| max_length | encode_batch every record (s) | context_length (s) | speed-up |"
        " records tokenized | too long |",
        "|---|---|---|---|---|---|",
    ]
    for limit, r, e, x, n, f in rows:
        lines.append(f"| {limit} | {r:.1f} | {e:.1f} | {x:.1f}x | {n} | {f} |")
    lines += ["", "Targets: >= 2x at 2048, >= 4x at 4096. too-long counts checked equal to the"
              " full encoding in the same run."]
    out = "\n".join(lines) + "\n"
    print(out)
    (REPO / "benchmarks" / "results" / "context_length.md").write_text(out, encoding="utf-8")


if __name__ == "__main__":
    main()
