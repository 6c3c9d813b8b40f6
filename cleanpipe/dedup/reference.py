"""Reference (eval/test) datasets for contamination checks: path or in-memory table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa


def load_reference(item: Any) -> tuple[str, pa.Table]:
    """``(name, table)`` of one ``reference:`` entry: a dataset path or a ``pyarrow.Table``."""
    if isinstance(item, pa.Table):
        return f"table[{item.num_rows}]", item
    # the readers (every input format) load only when a pipeline names a reference file
    from cleanpipe.io import read_table

    return Path(str(item)).name, read_table(str(item))


def table_batches(table: pa.Table, size: int = 8192) -> list[pa.RecordBatch]:
    return table.combine_chunks().to_batches(max_chunksize=size) if table.num_rows else []
