"""The hand-written script a user would write instead of a tool (run in the project's .venv).

Three phases over the same records, timed one by one: per-record ``ftfy.fix_text`` on prompt
and completion; the datasketch loop (``MinHash.update_batch`` over 5-word shingles, then
``MinHashLSH`` query-then-insert per document, 14 bands x 8 rows like the peers); one
``Tokenizer.encode_batch`` over every text, dropping rows over the context window. Row
identity is ``<file>:<line>`` (1-based), as in the other peers.

Usage (the harness calls it; it prints one JSON line)::

    .venv/bin/python benchmarks/peers/naive.py --input DIR --work DIR \\
        --tokenizer tokenizer.json --max-tokens N
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import ftfy
from datasketch import MinHash, MinHashLSH
from tokenizers import Tokenizer


def read_records(folder: Path) -> tuple[list[str], list[str], list[str]]:
    ids, prompts, completions = [], [], []
    for f in sorted(folder.glob("*.jsonl")):
        with f.open(encoding="utf-8") as fh:
            for i, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                rec = json.loads(line)
                ids.append(f"{f.name}:{i}")
                prompts.append(rec.get("prompt") or "")
                completions.append(rec.get("completion") or "")
    return ids, prompts, completions


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--bands", type=int, default=14)
    ap.add_argument("--rows", type=int, default=8)
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    phases: dict[str, float] = {}

    t = time.perf_counter()
    ids, prompts, completions = read_records(Path(args.input))
    phases["read"] = time.perf_counter() - t

    t = time.perf_counter()
    prompts = [ftfy.fix_text(p) for p in prompts]
    completions = [ftfy.fix_text(c) for c in completions]
    texts = [f"{p}\n{c}" for p, c in zip(prompts, completions, strict=True)]
    phases["ftfy"] = time.perf_counter() - t

    t = time.perf_counter()
    num_perm = args.bands * args.rows
    lsh = MinHashLSH(num_perm=num_perm, params=(args.bands, args.rows))
    removed: dict[str, str] = {}
    keep = []
    for rid, text in zip(ids, texts, strict=True):
        words = text.lower().split()
        shingles = {
            " ".join(words[i : i + args.window]).encode("utf-8")
            for i in range(max(len(words) - args.window + 1, 0))
        }
        if not shingles:
            keep.append(True)
            continue
        m = MinHash(num_perm=num_perm, seed=1)
        m.update_batch(list(shingles))
        if lsh.query(m):
            removed[rid] = "minhash"
            keep.append(False)
        else:
            lsh.insert(rid, m)
            keep.append(True)
    phases["datasketch"] = time.perf_counter() - t

    t = time.perf_counter()
    tok = Tokenizer.from_file(args.tokenizer)
    kept_ids = [i for i, k in zip(ids, keep, strict=True) if k]
    kept_texts = [x for x, k in zip(texts, keep, strict=True) if k]
    encodings = tok.encode_batch(kept_texts, add_special_tokens=False)
    for rid, enc in zip(kept_ids, encodings, strict=True):
        if len(enc.ids) > args.max_tokens:
            removed[rid] = "length"
    phases["encode_batch"] = time.perf_counter() - t

    removed_file = work / "removed_ids.json"
    removed_file.write_text(json.dumps(removed))
    print(json.dumps({
        "rows_out": len(ids) - len(removed),
        "removed": len(removed),
        "removed_by": {r: list(removed.values()).count(r) for r in ("length", "minhash")},
        "removed_ids_file": str(removed_file),
        "phases_s": phases,
        "pipeline_s": sum(phases.values()),
    }))


if __name__ == "__main__":
    main()
