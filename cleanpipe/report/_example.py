"""A realistic report for docs and tests, shaped like an SFT run on mixed zh/en data."""

from __future__ import annotations

import hashlib
from typing import Any


def _sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def example_report() -> dict[str, Any]:
    from cleanpipe.gate import GateConfig, evaluate

    edges = [0, 64, 128, 256, 512, 1024, 2048, 4096, 8192]

    def token_hist(counts: list[int]) -> dict[str, Any]:
        return {"edges": edges[:len(counts)], "counts": counts, "bounded": [0] * len(counts)}

    labels = {"positive": 520, "negative": 401, "neutral": 39}
    stages = [
        {"index": 0, "name": "unicode", "params": {"normalization": "NFC"}, "rows_in": 1000,
         "rows_out": 1000, "changed": 41, "dropped": 0, "flagged": 0, "failed": 0,
         "seconds": 0.31,
         "codes": {"mojibake": {"action": "fix", "events": 37, "rows": 35},
                   "replacement_char": {"action": "flag", "events": 4, "rows": 3}},
         "metrics": {"fixed_chars": 412}},
        {"index": 1, "name": "invisible_chars", "params": {}, "rows_in": 1000,
         "rows_out": 1000, "changed": 29, "dropped": 0, "flagged": 0, "failed": 0,
         "seconds": 0.05,
         "codes": {"zero_width": {"action": "fix", "events": 31, "rows": 29}},
         "metrics": {"codepoints": {"U+200B": 24, "U+FEFF": 5, "U+00A0": 11, "U+202E": 1}}},
        {"index": 2, "name": "exact_dedup", "params": {"keep": "first"}, "rows_in": 1000,
         "rows_out": 975, "changed": 0, "dropped": 25, "flagged": 0, "failed": 0,
         "seconds": 0.12,
         "codes": {"exact_duplicate": {"action": "drop", "events": 25, "rows": 25}},
         "metrics": {"clusters": 19},
         "diagnostics": {"memory": {"index_bytes_per_row": 24.0,
                                    "names_and_snippets_bytes_per_row": 96.5}},
         "section": {"clusters": [
             {"size": 3, "kept": "train.jsonl:12",
              "dropped": ["train.jsonl:480", "train.jsonl:911"],
              "text": "What is the capital of France?"},
             {"size": 2, "kept": "train.jsonl:77", "dropped": ["train.jsonl:78"],
              "text": "把下面的句子翻译成英文：今天天气很好。"}]}},
        {"index": 3, "name": "context_length", "params": {"max_tokens": 4096}, "rows_in": 975,
         "rows_out": 962, "changed": 0, "dropped": 13, "flagged": 0, "failed": 0,
         "seconds": 0.88,
         "codes": {"too_long": {"action": "drop", "events": 9, "rows": 9},
                   "no_trainable_tokens": {"action": "drop", "events": 4, "rows": 4}},
         "metrics": {"tokenized": 975},
         "distributions": {"tokens_before": token_hist([210, 330, 250, 130, 50, 16, 9, 5]),
                           "tokens_after": token_hist([203, 326, 247, 128, 42, 16, 0, 0])},
         "totals": {"total_tokens_before": {"value": 812345, "bounded_rows": 0},
                    "total_tokens_after": {"value": 748120, "bounded_rows": 0},
                    "rows_measured": {"value": 975, "bounded_rows": 0},
                    "rows_over_window": {"value": 13, "bounded_rows": 0},
                    "share_over_window": {"value": 0.013333, "bounded_rows": 0}}},
        {"index": 4, "name": "labels", "params": {"field": "label"}, "rows_in": 962,
         "rows_out": 962, "changed": 0, "dropped": 0, "flagged": 2, "failed": 0,
         "seconds": 0.01,
         "codes": {"unknown_label": {"action": "flag", "events": 2, "rows": 2}},
         "metrics": {},
         "distributions": {"labels": labels}},
    ]
    reasons = [
        {"stage": s["name"], "code": code, "action": c["action"], "events": c["events"],
         "rows": c["rows"]}
        for s in stages for code, c in s["codes"].items()
    ]
    examples = [
        {"stage": "unicode", "code": "mojibake", "action": "fix", "row_id": "train.jsonl:3",
         "field": "output", "detail": "ftfy: encoding fixed",
         "before": "The cafÃ© is closed â€” come back tomorrow.",
         "after": "The café is closed — come back tomorrow."},
        {"stage": "unicode", "code": "replacement_char", "action": "flag",
         "row_id": "train.jsonl:55", "field": "instruction", "detail": "1 × U+FFFD",
         "before": "患者主诉头痛\ufffd三天", "after": None},
        {"stage": "invisible_chars", "code": "zero_width", "action": "fix",
         "row_id": "train.jsonl:8", "field": "conversations[*].value", "detail": "U+200B",
         "before": "Hello\u200b world\ufeff", "after": "Hello world"},
        {"stage": "exact_dedup", "code": "exact_duplicate", "action": "drop",
         "row_id": "train.jsonl:480", "field": None, "detail": "duplicate of train.jsonl:12",
         "before": "What is the capital of France?", "after": None},
        {"stage": "context_length", "code": "too_long", "action": "drop",
         "row_id": "train.jsonl:301", "field": None, "detail": "5120 tokens > 4096",
         "before": "Summarize the following article:\n" + "lorem ipsum " * 30, "after": None},
        {"stage": "context_length", "code": "no_trainable_tokens", "action": "drop",
         "row_id": "train.jsonl:640", "field": "output", "detail": "0 trainable tokens",
         "before": "", "after": None},
        {"stage": "labels", "code": "unknown_label", "action": "flag",
         "row_id": "train.jsonl:900", "field": "label", "detail": "'positve' not in labels",
         "before": "positve", "after": None},
    ]
    report: dict[str, Any] = {
        "schema_version": "2",
        "cleanpipe_version": "0.1.0",
        "versions": {"python": "3.11.2", "pyarrow": "17.0.0", "polars": "1.9.0"},
        "pipeline": {"name": "sft-example", "path": "pipelines/sft.yaml",
                     "config_hash": _sha("sft-example"),
                     "config": {"stages": [{"stage": s["name"], **s["params"]} for s in stages],
                                "gate": {"max_dropped_fraction": 0.05}}},
        "input": {"paths": ["data/train.jsonl"], "files": 1, "bytes": 1834221,
                  "fingerprint": _sha("data/train.jsonl")},
        "output": {"path": "out/sft", "format": "parquet", "written": True},
        "totals": {"read": 1000, "kept": 962, "quarantined": 38, "changed": 68, "flagged": 5,
                   "failed": 0},
        "stages": stages,
        "reasons": reasons,
        "examples": examples,
        "distributions": {
            "chars_before": {"edges": edges, "counts": [40, 120, 260, 300, 160, 70, 30, 15, 5]
                             [: len(edges) - 1]},
            "chars_after": {"edges": edges, "counts": [36, 117, 255, 296, 157, 68, 26, 7, 0]
                            [: len(edges) - 1]},
            "tokens_before": stages[3]["distributions"]["tokens_before"],
            "tokens_after": stages[3]["distributions"]["tokens_after"],
            "labels": labels,
            "fields": {
                "before": {"instruction": {"strings": 1000, "empty": 0, "chars": 61234,
                                           "max_chars": 2890},
                           "output": {"strings": 1000, "empty": 4, "chars": 402511,
                                      "max_chars": 30112}},
                "after": {"instruction": {"strings": 962, "empty": 0, "chars": 58001,
                                          "max_chars": 2890},
                          "output": {"strings": 962, "empty": 0, "chars": 371340,
                                     "max_chars": 16030}}},
        },
        "timing": {"wall_seconds": 2.4, "rows_per_second": 416.7,
                   "started": "2026-12-02T17:00:00+00:00"},
    }
    report["verdict"] = evaluate(report, GateConfig(max_dropped_fraction=0.05,
                                                    never=["replacement_char"]))
    return report


def hostile_report(strings: list[str]) -> dict[str, Any]:
    """:func:`example_report` with ``strings`` placed in every free-text slot a dataset can
    reach: snippets, details, row ids, field names, labels, cluster texts, stage and pipeline
    names. For checking that no renderer lets data become markup."""
    report = example_report()
    if not strings:
        return report
    s = list(strings)

    def pick(i: int) -> str:
        return s[i % len(s)]

    report["pipeline"]["name"] = pick(0)
    report["input"]["paths"] = s[:5]
    examples = []
    for i, text in enumerate(s):
        examples.append({"stage": "unicode", "code": "mojibake", "action": "fix",
                         "row_id": f"blns.json:{i}:{pick(i + 1)}", "field": pick(i + 2),
                         "detail": pick(i + 3), "before": text, "after": pick(i + 4)})
    report["examples"] = report["examples"] + examples
    report["distributions"]["labels"] = {pick(i): i + 1 for i in range(min(len(s), 60))}
    report["stages"][2]["section"]["clusters"] += [
        {"size": 2, "kept": pick(i), "dropped": [pick(i + 1)], "text": pick(i + 2)}
        for i in range(min(len(s), 30))]
    report["stages"][0]["metrics"]["by_script"] = {pick(i): 1 for i in range(min(len(s), 20))}
    report["stages"][1]["metrics"]["codepoints"] = {**report["stages"][1]["metrics"]["codepoints"],
                                                     **{pick(i): 2 for i in range(5)}}
    report["verdict"]["rules"].append({"name": pick(7), "passed": False, "message": pick(8),
                                       "value": None, "limit": None})
    return report
