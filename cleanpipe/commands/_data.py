"""Shared by the subcommands: reading a cleaned output folder (or any input) as one table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa


def data_source(path: str | Path) -> Any:
    """What to read for ``path``: a cleanpipe output folder means its ``data/`` (the cleaned
    rows, never the quarantine or the reports); anything else is read as given."""
    p = Path(path)
    if p.is_dir() and (p / "_SUCCESS").exists() and (p / "data").is_dir():
        return str(p / "data")
    return str(path)


def read_dataset(path: str | Path) -> pa.Table:
    """All rows of ``path`` (see :func:`data_source`), in read order."""
    from cleanpipe.io import read_table

    return read_table(data_source(path))
