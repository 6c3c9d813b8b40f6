"""A template SFT pipeline whose global dedup drops rows after its token stages, and an oracle
for what the report's "after" figures must be: the rows the run wrote, tokenized here with
the ``tokenizers`` library alone (nothing of cleanpipe's but the bucket edges).

Shared by tests/test_report_written_totals.py (local engine) and tests/test_ray.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tokenizers import Tokenizer

from cleanpipe import Pipeline
from cleanpipe.contract import published as pub
from cleanpipe.contract.stage import Action, Findings, TextResult, TextStage
from cleanpipe.stages.context_length import ContextLength
from cleanpipe.stages.exact_dedup import ExactDedup
from cleanpipe.stages.minhash_dedup import MinHashDedup
from cleanpipe.stages.trainable_tokens import TrainableTokens

TEMPLATE = "{prompt} {output}"
WINDOW = 12
FIELDS = ["prompt", "output"]
#: what :class:`GrowAnswer` appends
GROWN = "one two three four five six"


class GrowAnswer(TextStage):
    """Appends six words to every answer holding ``grow``: a rewrite after the token
    stages measured the row, so their figures of it are stale (and one grown row no longer
    fits the window: written as it is, counted as it is)."""

    name = "_test_grow_answer"
    codes = {"grow": Action.FIX}

    def transform(self, texts: pa.Array) -> TextResult:
        f = Findings(self.name)
        hit = pc.fill_null(pc.match_substring(texts, "grow"), False)
        f.add(hit, "grow", self.action_of("grow"))
        grown = pc.if_else(hit, pc.binary_join_element_wise(texts, GROWN, " "),
                           texts)
        return TextResult(grown, f, {})


def corpus() -> list[dict[str, str]]:
    """Rows of every kind the figures must get right: exact and near duplicates (dropped
    by the dedup stages after the token stages), rows over the window (answers truncated),
    rows whose answer a later stage lengthens, and rows with an empty answer."""
    rows = []
    for i in range(24):
        words = " ".join(f"w{i}x{j}" for j in range(i % 7 + 1))
        rows.append({"prompt": f"question {i} about {words}", "output": f"answer {words}"})
    rows += [dict(rows[3]), dict(rows[5]), dict(rows[5])]  # exact duplicates
    near = "alpha beta gamma delta epsilon zeta eta theta iota"
    rows += [{"prompt": "near", "output": near},
             {"prompt": "near", "output": near + " kappa"}]  # near duplicates
    rows += [{"prompt": "long one", "output": " ".join(f"l{j}" for j in range(30))},
             {"prompt": "long two", "output": " ".join(f"m{j}" for j in range(9))}]
    rows += [{"prompt": "please grow", "output": "grow a bit"},
             {"prompt": "grow again", "output": "grow more words here please"},
             {"prompt": "no answer", "output": ""}]
    return rows


def write_corpus(path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in corpus()), encoding="utf-8")
    return path


def write_small_files(folder: Path, rows_per_file: int = 2) -> Path:
    """The corpus as many small files (``rows_per_file`` rows each), in ``folder``."""
    rows = corpus()
    folder.mkdir()
    for k in range(0, len(rows), rows_per_file):
        (folder / f"part-{k:03d}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows[k:k + rows_per_file]), encoding="utf-8")
    return folder


def pipeline(tokenizer: str, *, exact: bool = True, grow: bool = False,
             minhash: bool = True, batch_size: int = 7,
             flag_column: str | None = None) -> Pipeline:
    """context_length (truncating) and trainable_tokens, then (optionally) a rewrite of some
    answers, then exact_dedup and (optionally) minhash_dedup, which drop rows the token
    stages passed on; ``flag_column``: the output's column of flagged codes."""
    stages: list[Any] = [
        ContextLength(tokenizer=tokenizer, template=TEMPLATE, max_length=WINDOW,
                      exact_counts=exact, actions={"too_long": Action.FIX}),
        TrainableTokens(tokenizer=tokenizer, template=TEMPLATE, max_length=WINDOW,
                        exact_counts=exact, action=Action.FLAG),
    ]
    if grow:
        stages.append(GrowAnswer(fields=["output"]))
    stages.append(ExactDedup())
    if minhash:
        stages.append(MinHashDedup(threshold=0.7, num_perm=64))
    output = {"flag_column": flag_column} if flag_column else {}
    return Pipeline(stages=stages, fields=FIELDS, batch_size=batch_size, output=output)


def written_rows(out: Path) -> list[dict[str, Any]]:
    """The rows the run wrote to ``out`` (parquet, in order)."""
    return pq.read_table(sorted((out / "data").glob("*.parquet"))).to_pylist()


def oracle(tokenizer: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Total tokens, supervised tokens within the window, and the token-length histogram of
    ``rows``, each rendered with :data:`TEMPLATE` and tokenized by ``tokenizers``."""
    tok = Tokenizer.from_file(tokenizer)
    lengths, supervised = [], 0
    for r in rows:
        text = TEMPLATE.format(**r)
        start = len(r["prompt"]) + 1  # the answer's span in the rendered text
        enc = tok.encode(text)
        lengths.append(len(enc.ids))
        supervised += sum(1 for a, b in enc.offsets[:WINDOW] if a < len(text) and b > start)
    buckets = np.searchsorted(np.asarray(pub.TOKEN_EDGES[1:]), lengths, side="right")
    hist = np.bincount(buckets, minlength=len(pub.TOKEN_EDGES)).tolist()
    return {"total": sum(lengths), "supervised": supervised, "hist": hist}


def after_figures(report: dict[str, Any]) -> dict[str, Any]:
    """The report's "after" figures, in :func:`oracle`'s shape, with their bounded rows."""
    cl, tt = report["stages"][0], report["stages"][1]
    return {"total": cl["totals"][pub.TOTAL_TOKENS_AFTER]["value"],
            "supervised": tt["totals"][pub.SUPERVISED_TOKENS_AFTER]["value"],
            "hist": cl["distributions"][pub.TOKENS_AFTER]["counts"],
            "bounded": (cl["totals"][pub.TOTAL_TOKENS_AFTER]["bounded_rows"],
                        tt["totals"][pub.SUPERVISED_TOKENS_AFTER]["bounded_rows"])}
