"""Helpers for the dedup tests: drive a GlobalStage the way the engine does, load real data."""

from __future__ import annotations

import glob
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

from cleanpipe.contract.stage import Action, BatchContext, GlobalStage


def run_global(stage: GlobalStage, table: pa.Table, fields: list[str], batch_size: int = 1000,
               with_ids: bool = True, through_pickle: bool = True) -> dict[str, dict[int, str]]:
    """Two passes over ``table`` in batches; ``{code: {seq: detail}}`` of every finding.

    ``through_pickle`` sends the stage through pickle before prepare and before decide, as
    the engine does when it ships a stage to worker processes.
    """
    batches = table.combine_chunks().to_batches(max_chunksize=batch_size)
    worker = pickle.loads(pickle.dumps(stage)) if through_pickle else stage
    seq0 = 0
    for b in batches:
        ids = pa.array([f"r{i}" for i in range(seq0, seq0 + b.num_rows)]) if with_ids else None
        ctx = BatchContext(b, fields, row_ids=ids)
        prepared = worker.prepare(b, ctx)
        if through_pickle:
            prepared = pickle.loads(pickle.dumps(prepared))
        stage.observe(prepared, np.arange(seq0, seq0 + b.num_rows), b, ctx)
        seq0 += b.num_rows
    stage.finalize()
    decider = pickle.loads(pickle.dumps(stage)) if through_pickle else stage
    out: dict[str, dict[int, str]] = {}
    seq0 = 0
    for b in batches:
        ids = pa.array([f"r{i}" for i in range(seq0, seq0 + b.num_rows)]) if with_ids else None
        ctx = BatchContext(b, fields, row_ids=ids)
        res = decider.decide(b, np.arange(seq0, seq0 + b.num_rows), ctx)
        for c in res.findings.chunks:
            assert c.action in (Action.DROP, Action.FLAG)
            for k, p in enumerate(c.positions.tolist()):
                out.setdefault(c.code, {})[seq0 + p] = c.detail[k] if c.detail else ""
        seq0 += b.num_rows
    return out


def load_t0(root, limit_files: int | None = None) -> pa.Table:
    """The t0 corpus as a table with a ``text`` column = prompt + completion."""
    files = sorted(glob.glob(str(root / "sft_self_instruct_t0_50k" / "data_per_template" /
                                 "*.jsonl")))
    tables = []
    for f in files[:limit_files]:
        try:
            t = pj.read_json(f)
        except pa.ArrowInvalid:  # the empty shards
            continue
        if t.num_rows:
            tables.append(t.select(["prompt", "completion"]))
    t = pa.concat_tables(tables)
    import pyarrow.compute as pc

    return t.append_column("text", pc.binary_join_element_wise(t["prompt"], t["completion"], ""))


def load_medical(root) -> list[str]:
    """First human turn + answer of each medicalgpt record (Chinese)."""
    import json

    out = []
    path = root / "sft_medicalgpt_zh" / "medical_sft_1K_format.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        out.append("".join(turn["value"] for turn in rec["conversations"]))
    return out
