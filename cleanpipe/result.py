"""What :meth:`cleanpipe.Pipeline.clean` returns: the cleaned data and a typed report.

    >>> import pyarrow as pa
    >>> from cleanpipe import Pipeline
    >>> result = Pipeline(stages=[{"stage": "exact_dedup"}], fields=["text"]).clean(
    ...     pa.table({"text": ["a", "a", "b"]}))
    >>> result.dataset.column("text").to_pylist()
    ['a', 'b']
    >>> result.report.totals["quarantined"], result.report.passed
    (1, True)
    >>> result.report.quarantine["_cleanpipe_reasons"][:]
    [['exact_duplicate']]
    >>> data, report = result  # a result unpacks like a pair
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa

from cleanpipe.io.schemas import cast_batch, unify_schemas


@dataclass(frozen=True)
class CleanReport:
    """The run's report with the rows it dropped.

    ``to_dict()`` is the report ``Pipeline.run`` returns (and writes as report.json);
    ``quarantine`` holds every dropped row as read, with the ``_cleanpipe_stage``,
    ``_cleanpipe_reasons`` and ``_cleanpipe_details`` columns the written quarantine has.
    """

    data: dict[str, Any]
    quarantine: Any  # datasets.Dataset: typed loosely so importing this module stays light

    def to_dict(self) -> dict[str, Any]:
        return self.data

    @property
    def verdict(self) -> dict[str, Any]:
        """The gate's verdict: ``passed``, ``exit_code`` and the rules checked."""
        return dict(self.data.get("verdict") or {})

    @property
    def passed(self) -> bool:
        return bool(self.verdict.get("passed", True))

    @property
    def exit_code(self) -> int:
        """What ``cleanpipe run`` would exit with for this report (0 = passed)."""
        return int(self.verdict.get("exit_code", 0))

    @property
    def totals(self) -> dict[str, int]:
        """``read``, ``kept``, ``quarantined`` and the other row counts of the run."""
        return dict(self.data["totals"])


class CleanResult(NamedTuple):
    """``dataset`` (the input's type) and ``report`` (:class:`CleanReport`)."""

    dataset: Any
    report: CleanReport


def unified_table(batches: list[pa.RecordBatch], empty: pa.Schema | None) -> pa.Table:
    """Batches of possibly different schemas as one table in their unified schema, as the
    output writer unifies its parts; ``empty`` is the schema when there is no batch."""
    batches = [b for b in batches if b.num_rows]
    if not batches:
        return (empty if empty is not None else pa.schema([])).empty_table()
    schema = unify_schemas([("", b.schema) for b in batches])
    return pa.Table.from_batches([cast_batch(b, schema) for b in batches], schema=schema)


def as_dataset(table: pa.Table, like: Any = None) -> Any:
    """``table`` as an in-memory ``datasets.Dataset``; the features of ``like`` (a
    ``Dataset``: ClassLabel names, say) carry over when the columns kept their types."""
    import datasets
    from datasets.table import InMemoryTable

    same = like is not None and table.schema.equals(like.data.schema)
    return datasets.Dataset(InMemoryTable(table), info=like.info.copy() if same else None)


def like_input(table: pa.Table, input: Any) -> Any:
    """``table`` in the type of ``input``: see :meth:`cleanpipe.Pipeline.clean`."""
    if isinstance(input, (pa.Table, pa.RecordBatch)):
        return table
    mod = type(input).__module__
    if mod.startswith("polars"):
        import polars as pl

        return pl.from_arrow(table)
    if mod.startswith("datasets"):
        import datasets

        if isinstance(input, datasets.IterableDataset):
            return as_dataset(table).to_iterable_dataset()
        if isinstance(input, datasets.Dataset):
            return as_dataset(table, input)
    return as_dataset(table)
