"""What a batch-level stage may ask of the engine about the batch it is given."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from cleanpipe.fields import flatten_field


@dataclass
class FlatTexts:
    """The strings of one text field, flattened: ``values[i]`` belongs to row ``rows[i]``."""

    field: str
    values: pa.Array
    rows: np.ndarray


class BatchContext:
    """What a batch-level stage may ask of the engine about the current batch.

    ``text_fields`` are the pipeline's declared text fields; :meth:`texts` flattens one of
    them (nested paths such as ``conversations[*].value`` included). Build one yourself with
    ``BatchContext(batch, ["instruction", "output"])`` when using a stage alone.
    """

    def __init__(self, batch: pa.RecordBatch, text_fields: Iterable[str] = (),
                 row_ids: pa.Array | None = None) -> None:
        self.batch = batch
        self.text_fields = list(text_fields)
        self.row_ids = row_ids
        self._cache: dict[str, FlatTexts] = {}

    def texts(self, field_path: str) -> FlatTexts:
        if field_path not in self._cache:
            values, rows = flatten_field(self.batch, field_path)
            self._cache[field_path] = FlatTexts(field_path, values, rows)
        return self._cache[field_path]

    def all_texts(self, fields: Iterable[str] | None = None) -> list[FlatTexts]:
        names = self.text_fields if fields is None else list(fields)
        return [self.texts(f) for f in names]
