"""Loading the real data sets the guard tests use (JSON arrays and JSONL) as Arrow tables."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj


def read_records(path: Path) -> pa.Table:
    """A JSON array file or a JSONL file as a table (JSONL split on "\\n" only)."""
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        return pa.Table.from_pylist(json.loads(text))
    rows = [json.loads(line) for line in text.split("\n") if line.strip()]
    return pa.Table.from_pylist(rows)


def read_t0(root: Path) -> pa.Table:
    """All non-empty shards of sft_self_instruct_t0_50k, in file-name order."""
    files = sorted((root / "data_per_template").glob("*.jsonl"))
    return pa.concat_tables(pj.read_json(f) for f in files if f.stat().st_size)


def strip_endoftext(table: pa.Table) -> pa.Table:
    """The t0 completions without their literal trailing ``<|endoftext|>``."""
    col = pc.replace_substring_regex(table["completion"], r"<\|endoftext\|>$", "")
    return table.set_column(table.schema.get_field_index("completion"), "completion", col)


def t0_guard_stages(tokenizer: Path) -> list:
    """The shipped stages that quarantine t0's completions with nothing to train on, as the
    SFT pipelines chain them: ``special_tokens`` strips the literal ``<|endoftext|>`` (a
    tokenizer reads it as a control token, not as text), then ``trainable_tokens`` drops
    the completions left empty."""
    from cleanpipe.stages.special_tokens import SpecialTokens
    from cleanpipe.stages.trainable_tokens import TrainableTokens

    return [SpecialTokens(tokenizer=str(tokenizer)),
            TrainableTokens(tokenizer=str(tokenizer), template="{prompt}{completion}",
                            response_field="completion")]
