"""Reference (eval/test) datasets for contamination checks: path or in-memory table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from cleanpipe.contract.stage import StageError


def load_reference(item: Any) -> tuple[str, pa.Table]:
    """``(name, table)`` of one ``reference:`` entry: a dataset path or a ``pyarrow.Table``."""
    if isinstance(item, pa.Table):
        return f"table[{item.num_rows}]", item
    path = Path(str(item))
    try:
        from cleanpipe.io import read_table  # the project's reader (all formats it knows)
    except ImportError:  # pragma: no cover - until cleanpipe.io lands
        read_table = None
    if read_table is not None:
        return path.name, read_table(str(path))
    return path.name, _fallback_read(path)  # pragma: no cover


def _fallback_read(path: Path) -> pa.Table:  # pragma: no cover - replaced by cleanpipe.io
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    if not path.exists():
        raise StageError(f"reference dataset not found: {path}")
    if path.suffix == ".parquet":
        return pq.read_table(path)
    if path.suffix in (".jsonl", ".json"):
        return pj.read_json(path)
    raise StageError(f"cannot read reference {path}: use .parquet or .jsonl")


def table_batches(table: pa.Table, size: int = 8192) -> list[pa.RecordBatch]:
    return table.combine_chunks().to_batches(max_chunksize=size) if table.num_rows else []
