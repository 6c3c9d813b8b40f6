"""Shared by the subcommands: reading a cleaned output folder (or any input) as one table."""

from __future__ import annotations

import argparse
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


def add_sample_command(subparsers: Any, name: str, summary: str, description: str, rows: int,
                       seed_help: str = "random seed (default 0)") -> argparse.ArgumentParser:
    """A subcommand that samples a dataset: the dataset (``input``, read with
    :func:`read_dataset`), how many rows (``-n``) and the seed (``--seed``)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(name, help=summary,
                                                            description=description)
    parser.add_argument("input", help="cleaned output folder, or any dataset path cleanpipe reads")
    parser.add_argument("-n", type=int, default=rows, help=f"rows to take (default {rows})")
    parser.add_argument("--seed", type=int, default=0, help=seed_help)
    return parser


def read_dataset(path: str | Path) -> pa.Table:
    """All rows of ``path`` (see :func:`data_source`), in read order."""
    from cleanpipe.io import read_table

    return read_table(data_source(path))
