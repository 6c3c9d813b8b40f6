"""datatrove's closest equivalent of cleanpipe's default SFT pipeline (run in .venv-datatrove).

FTFYFormatter -> datatrove's four MinHash steps (signatures, buckets, clusters, filter) ->
token counting (TokensCounter, offline Qwen3 tokenizer.json) and a LambdaFilter dropping
documents over the context window: cleanpipe's order (Unicode, dedup, length). A record's
text is ``prompt + "\\n" + completion`` (datatrove handles one text per document) and its id
is ``<file>:<line>`` (1-based), the row identity the harness compares across tools.

Usage (the harness calls it; it prints one JSON line)::

    benchmarks/.venv-datatrove/bin/python benchmarks/peers/datatrove_pipeline.py \\
        --input DIR --work DIR --tokenizer tokenizer.json --max-tokens N --workers 2
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup import (
    MinhashDedupBuckets,
    MinhashDedupCluster,
    MinhashDedupFilter,
    MinhashDedupSignature,
)
from datatrove.pipeline.dedup.minhash import MinhashConfig
from datatrove.pipeline.filters import LambdaFilter
from datatrove.pipeline.formatters import FTFYFormatter
from datatrove.pipeline.readers import JsonlReader
from datatrove.pipeline.tokens import TokensCounter
from datatrove.pipeline.writers import JsonlWriter


def sft_adapter(self, data: dict, path: str, id_in_file: int | str) -> dict:
    return {
        "text": f"{data.get('prompt') or ''}\n{data.get('completion') or ''}",
        "id": f"{Path(path).name}:{int(id_in_file) + 1}",
        "metadata": {},
    }


def id_adapter(self, data: dict, path: str, id_in_file: int | str) -> dict:
    # The intermediate files are datatrove's own output: keep the id they carry.
    return {"text": data["text"], "id": data["id"], "metadata": data.get("metadata", {})}


def fits(doc, limit: int) -> bool:
    return doc.metadata["token_count"] <= limit


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--n-grams", type=int, default=5)
    ap.add_argument("--bands", type=int, default=14)
    ap.add_argument("--rows", type=int, default=8)
    args = ap.parse_args()

    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cfg = MinhashConfig(n_grams=args.n_grams, num_buckets=args.bands, hashes_per_bucket=args.rows)
    limit = args.max_tokens
    tasks = args.workers
    t0 = time.perf_counter()

    # Step 1: fix the text, keep it (so that step 4 need not redo ftfy) and write the MinHash
    # signatures. Same order as cleanpipe's pipeline: Unicode, then dedup, then length.
    step1 = LocalPipelineExecutor(
        pipeline=[
            JsonlReader(args.input, adapter=sft_adapter, glob_pattern="*.jsonl"),
            FTFYFormatter(),
            JsonlWriter(str(work / "fixed"), output_filename="${rank}.jsonl", compression=None),
            MinhashDedupSignature(output_folder=str(work / "sigs"), config=cfg),
        ],
        tasks=tasks,
        workers=args.workers,
        logging_dir=str(work / "logs1"),
    )
    step1.run()
    step2 = LocalPipelineExecutor(
        pipeline=[
            MinhashDedupBuckets(
                input_folder=str(work / "sigs"), output_folder=str(work / "buckets"), config=cfg
            )
        ],
        tasks=cfg.num_buckets,
        workers=args.workers,
        logging_dir=str(work / "logs2"),
    )
    step2.run()
    step3 = LocalPipelineExecutor(
        pipeline=[
            MinhashDedupCluster(
                input_folder=str(work / "buckets"), output_folder=str(work / "remove_ids"),
                config=cfg,
            )
        ],
        tasks=1,
        workers=1,
        logging_dir=str(work / "logs3"),
    )
    step3.run()
    step4 = LocalPipelineExecutor(
        pipeline=[
            JsonlReader(str(work / "fixed"), adapter=id_adapter, glob_pattern="*.jsonl"),
            MinhashDedupFilter(
                input_folder=str(work / "remove_ids"),
                exclusion_writer=JsonlWriter(str(work / "removed_minhash"), compression=None),
            ),
            TokensCounter(tokenizer_name_or_path=args.tokenizer),
            LambdaFilter(
                lambda doc: fits(doc, limit),
                exclusion_writer=JsonlWriter(str(work / "removed_length"), compression=None),
            ),
            JsonlWriter(str(work / "output"), compression=None),
        ],
        tasks=tasks,
        workers=args.workers,
        logging_dir=str(work / "logs4"),
    )
    step4.run()
    pipeline_s = time.perf_counter() - t0

    removed: dict[str, str] = {}
    for reason in ("length", "minhash"):
        for f in sorted((work / f"removed_{reason}").glob("*.jsonl")):
            for line in f.read_text().splitlines():
                if line.strip():
                    removed[json.loads(line)["id"]] = reason
    kept = sum(
        1 for f in (work / "output").glob("*.jsonl") for ln in f.open() if ln.strip()
    )
    removed_file = work / "removed_ids.json"
    removed_file.write_text(json.dumps(removed))
    print(json.dumps({
        "rows_out": kept,
        "removed": len(removed),
        "removed_by": {r: list(removed.values()).count(r) for r in ("length", "minhash")},
        "removed_ids_file": str(removed_file),
        "pipeline_s": pipeline_s,
    }))


if __name__ == "__main__":
    main()
