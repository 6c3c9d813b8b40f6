"""data-juicer's closest equivalent of cleanpipe's default SFT pipeline (run in .venv-datajuicer).

fix_unicode_mapper -> document_minhash_deduplicator -> token_num_filter (offline Qwen3
tokenizer directory, loaded by transformers), cleanpipe's order. data-juicer ops read one text
field, so the harness hands it the corpus as ``{"text": prompt + "\\n" + completion,
"row_id": "<file>:<line>"}`` records (same shards, same order, same text datatrove sees);
``row_id`` rides along untouched and names the removed rows afterwards.

Usage (the harness calls it; it prints one JSON line)::

    benchmarks/.venv-datajuicer/bin/python benchmarks/peers/datajuicer_pipeline.py \\
        --input DIR --work DIR --tokenizer-dir DIR --max-tokens N --np 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True, help="folder of {text,row_id} JSONL shards")
    ap.add_argument("--work", required=True)
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--bands", type=int, default=14)
    ap.add_argument("--rows", type=int, default=8)
    args = ap.parse_args()

    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    # A fresh datasets cache per run: a warm cache from an earlier run would skip the work.
    os.environ["HF_DATASETS_CACHE"] = str(work / "hf_cache")
    os.environ["HF_HOME"] = str(work / "hf_home")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    import yaml

    export = work / "output" / "result.jsonl"
    cfg = {
        "project_name": "cleanpipe-bench",
        "dataset_path": str(Path(args.input).resolve()),
        "export_path": str(export),
        "np": args.np,
        "text_keys": "text",
        "open_tracer": False,
        "process": [
            {"fix_unicode_mapper": {}},
            {
                "document_minhash_deduplicator": {
                    "tokenization": "space",
                    "window_size": args.window,
                    "lowercase": True,
                    "num_permutations": args.bands * args.rows,
                    "num_bands": args.bands,
                    "num_rows_per_band": args.rows,
                    "jaccard_threshold": 0.7,
                }
            },
            {
                "token_num_filter": {
                    "hf_tokenizer": str(Path(args.tokenizer_dir).resolve()),
                    "min_num": 0,
                    "max_num": args.max_tokens,
                }
            },
        ],
    }
    cfg_path = work / "pipeline.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))

    from data_juicer.config import init_configs
    from data_juicer.core import DefaultExecutor

    t0 = time.perf_counter()
    DefaultExecutor(init_configs(args=["--config", str(cfg_path)])).run()
    pipeline_s = time.perf_counter() - t0

    kept: set[str] = set()
    # result.jsonl holds the kept rows; result_stats.jsonl beside it holds only the stats.
    for f in sorted(export.parent.glob("result*.jsonl")):
        if f.name.endswith("_stats.jsonl"):
            continue
        with f.open() as fh:
            kept.update(json.loads(ln)["row_id"] for ln in fh if ln.strip())
    all_ids: list[str] = []
    for f in sorted(Path(args.input).glob("*.jsonl")):
        with f.open() as fh:
            all_ids.extend(json.loads(ln)["row_id"] for ln in fh if ln.strip())
    removed = {i: "removed" for i in all_ids if i not in kept}
    removed_file = work / "removed_ids.json"
    removed_file.write_text(json.dumps(removed))
    result = json.dumps({
        "rows_out": len(kept),
        "removed": len(removed),
        "removed_ids_file": str(removed_file),
        "pipeline_s": pipeline_s,
    })
    # data-juicer's logger takes over sys.stdout: write the result where the harness finds it.
    (work / "result.json").write_text(result)
    print(result, file=sys.__stdout__, flush=True)


if __name__ == "__main__":
    main()
