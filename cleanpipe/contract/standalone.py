"""Using one stage outside a pipeline: on a str, a list, an Arrow array, a polars Series,
a pyarrow Table/RecordBatch, a polars DataFrame or a ``dict`` batch (``datasets.map``).

    >>> from cleanpipe.contract.stage import Action, Findings, TextResult, TextStage
    >>> import pyarrow as pa, pyarrow.compute as pc
    >>> class Upper(TextStage):
    ...     name = "upper_doc"
    ...     codes = {"lower": Action.FIX}
    ...     def transform(self, texts):
    ...         return TextResult(pc.utf8_upper(texts), Findings(self.name))
    >>> Upper()("abc"), Upper()(["a", None])
    ('ABC', ['A', None])
    >>> Upper()({"text": ["x"], "n": [1]})
    {'text': ['X'], 'n': [1]}

Inside ``datasets.Dataset.map`` a text or batch stage works with and without
``batched=True`` (a row that the stage would drop cannot be removed by an unbatched map, so
that raises). A global stage (dedup, outliers) must see every row: ``map`` would hand it one
batch at a time, so it refuses there; call it on the whole ``Dataset`` instead.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from cleanpipe.contract.batch_context import BatchContext
from cleanpipe.contract.findings import Action, Findings
from cleanpipe.contract.text_fields import run_text_stage
from cleanpipe.errors import CleanpipeError
from cleanpipe.fields import discover_text_fields

if TYPE_CHECKING:
    from cleanpipe.contract.stage import BatchStage, GlobalStage, TextStage



class WholeDatasetRequired(CleanpipeError, TypeError):
    """A global stage was called on one batch of a ``datasets`` dataset (``Dataset.map``)."""


class RowWouldBeDropped(CleanpipeError, ValueError):
    """An unbatched ``Dataset.map`` cannot remove the row a stage drops."""


def _map_piece(data: Any) -> str | None:
    """``"batch"`` or ``"row"`` when ``data`` is what ``datasets.Dataset.map`` passes to
    its function (a ``LazyBatch`` or ``LazyRow``), else None."""
    if not isinstance(data, Mapping) or not type(data).__module__.startswith("datasets."):
        return None
    return "row" if type(data).__name__ == "LazyRow" else "batch"


def _loaded(module: str) -> Any:
    """``module`` if something imported it already, else None: a value cannot be a polars or
    ``datasets`` object unless its library is loaded, and importing one costs seconds."""
    return sys.modules.get(module)


def _is_dataset(data: Any) -> bool:
    datasets = _loaded("datasets")
    return datasets is not None and isinstance(data, datasets.Dataset)


def _to_string_array(data: Any) -> pa.Array:
    arr = pa.array(data, type=pa.large_string()) if not isinstance(data, pa.Array) else data
    return arr


def _drop_mask(findings: Findings, n: int) -> np.ndarray:
    keep = np.ones(n, dtype=bool)
    keep[findings.positions(Action.DROP)] = False
    return keep


def _batch_from(data: Any) -> tuple[pa.RecordBatch, str]:
    pl = _loaded("polars")
    if _is_dataset(data):
        return _batch_from(data.with_format("arrow")[:])[0], "dataset"
    if _map_piece(data) == "row":
        return pa.RecordBatch.from_pylist([dict(data)]), "row"
    if isinstance(data, pa.RecordBatch):
        return data, "batch"
    if isinstance(data, pa.Table):
        return data.combine_chunks().to_batches()[0] if data.num_rows else \
            pa.RecordBatch.from_pylist([], schema=data.schema), "table"
    if pl is not None and isinstance(data, pl.DataFrame):
        return _batch_from(data.to_arrow())[0], "polars"
    if isinstance(data, Mapping):
        # datasets.map(batched=True) passes a LazyBatch (a Mapping, not a dict)
        return pa.RecordBatch.from_pydict(dict(data)), "dict"
    raise TypeError(f"cannot apply a stage to {type(data).__name__}")


def _back(batch: pa.RecordBatch, kind: str, original: Any = None) -> Any:
    if kind == "row":
        rows = batch.to_pylist()
        if len(rows) != 1:
            raise RowWouldBeDropped(
                "the stage drops this row, which Dataset.map without batched=True cannot "
                "remove: use ds.map(stage, batched=True)")
        return rows[0]
    if kind == "dataset":
        from cleanpipe.result import as_dataset

        return as_dataset(pa.Table.from_batches([batch]), original)
    if kind == "batch":
        return batch
    if kind == "table":
        return pa.Table.from_batches([batch])
    if kind == "polars":
        import polars as pl

        return pl.from_arrow(pa.Table.from_batches([batch]))
    return batch.to_pydict()


def apply_text_stage(stage: TextStage, data: Any) -> Any:
    """See the module docstring; rows with a ``drop`` finding are removed from tables."""
    pl = _loaded("polars")
    stage.setup()
    if isinstance(data, str):
        return stage.transform(pa.array([data], pa.large_string())).texts[0].as_py()
    if isinstance(data, (list, tuple)):
        return stage.transform(_to_string_array(list(data))).texts.to_pylist()
    if isinstance(data, pa.ChunkedArray):
        return pa.chunked_array([stage.transform(c).texts for c in data.chunks], data.type)
    if isinstance(data, pa.Array):
        return stage.transform(data).texts
    if pl is not None and isinstance(data, pl.Series):
        arr = data.to_arrow()
        return pl.Series(data.name, stage.transform(arr).texts)
    batch, kind = _batch_from(data)
    batch, found, _ = run_text_stage(stage, batch, discover_text_fields(batch.schema))
    return _back(batch.filter(pa.array(_drop_mask(found, batch.num_rows))), kind, data)


def apply_batch_stage(stage: BatchStage, data: Any) -> Any:
    """Run a batch stage on a table-like value; rows it drops are removed."""
    stage.setup()
    batch, kind = _batch_from(data)
    ctx = BatchContext(batch, discover_text_fields(batch.schema))
    res = stage.process(batch, ctx)
    out = res.batch if res.batch is not None else batch
    return _back(out.filter(pa.array(_drop_mask(res.findings, out.num_rows))), kind, data)


def apply_global_stage(stage: GlobalStage, data: Any) -> Any:
    """Run a global stage (e.g. dedup) on an in-memory table-like value or a whole
    ``datasets.Dataset``; refuses one batch or row of a ``Dataset.map``."""
    if _map_piece(data) is not None:
        cls = type(stage).__name__
        raise WholeDatasetRequired(
            f"{stage.name} must see the whole dataset: inside Dataset.map it would compare "
            f"the rows of one batch only. Call it on the dataset instead: ds = {cls}(...)(ds)"
            ", or run a Pipeline")
    stage.setup()
    batch, kind = _batch_from(data)
    ctx = BatchContext(batch, discover_text_fields(batch.schema))
    seq = np.arange(batch.num_rows, dtype=np.int64)
    stage.observe(stage.prepare(batch, ctx), seq, batch, ctx)
    stage.finalize()
    res = stage.decide(batch, seq, ctx)
    out = res.batch if res.batch is not None else batch
    return _back(out.filter(pa.array(_drop_mask(res.findings, out.num_rows))), kind, data)
