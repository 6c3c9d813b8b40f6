"""``labels``: classification labels checked against the label vocabulary.

The vocabulary comes from an inline list, a file (a JSON list such as banking77's
``categories.json``; a JSON object whose keys are labels; JSON Lines whose ``label_key``
holds the label, such as TNEWS's ``label_index2en2zh.json``; or a text file, one label a
line), or ``num_labels`` (ids ``0..num_labels-1``). A label outside it is what makes a
cross-entropy index assert on the GPU.

When the data holds integers and the vocabulary strings (or the other way round), labels
are compared as text and every such row is flagged ``label_type_mismatch``, so the trainer's
mapping is fixed before training. Gaps in an integer vocabulary (TNEWS: 100–116 without 105
and 111) are reported in the metrics, because ``num_labels=max+1`` would be wrong.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, PrivateAttr

from cleanpipe.columns import is_utf8, typed_nulls
from cleanpipe.contract import published as pub
from cleanpipe.contract.batch_context import BatchContext
from cleanpipe.contract.findings import Action, BatchResult, Findings
from cleanpipe.contract.stage import BatchStage, StageError


def load_label_file(path: str | Path, key: str = "label") -> list[Any]:
    """Labels from a JSON list / object, JSON Lines (``key`` per line) or a text file."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
        lines = [ln for ln in text.split("\n") if ln.strip()]
        try:
            rows = [json.loads(ln) for ln in lines]
            if all(isinstance(r, dict) for r in rows):
                return [r.get(key) for r in rows]
        except json.JSONDecodeError:
            pass
        return [ln.strip() for ln in lines]
    if isinstance(data, list):
        return [d.get(key) if isinstance(d, dict) else d for d in data]
    if isinstance(data, dict):
        return list(data)
    raise StageError(f"labels: cannot read a label list from {path}")


def _is_int_like(v: Any) -> bool:
    return isinstance(v, int) or (isinstance(v, str) and v.strip().lstrip("-").isdigit())


class LabelCheck(BatchStage):
    """Check (and optionally map to ids) classification labels.

        >>> LabelCheck(labels=["neg", "pos"], id_field="label_id")(
        ...     {"label": ["pos", "meh", None]})
        {'label': ['pos'], 'label_id': [1]}
    """

    name = "labels"
    codes = {"unknown_label": Action.DROP, "null_label": Action.DROP,
             "label_type_mismatch": Action.FLAG, "label_id_mismatch": Action.DROP}
    publishes = frozenset({pub.LABELS})

    field: str = "label"
    """Label column: a scalar (single-label), or a list (multi-label / token labels)."""
    labels: list[str | int] | None = Field(None, min_length=1)
    """The label vocabulary, inline."""
    labels_file: str | None = None
    """A file holding the vocabulary (see the module docstring)."""
    label_key: str = "label"
    """Key of the label in a JSON Lines / JSON-objects label file."""
    num_labels: int | None = Field(None, ge=1)
    """Integer labels ``0..num_labels-1`` (token classification also allows ``-100``)."""
    kind: Literal["single", "multi", "token"] = "single"
    """``multi``: a list of labels per row; ``token``: a list of ids per token (-100 ok)."""
    id_field: str | None = None
    """Column of label ids: verified against the vocabulary order if present, else written
    (the string→id mapping applied)."""

    _vocab: list[Any] | None = PrivateAttr(default=None)

    def setup(self) -> None:
        if self._vocab is not None:
            return
        if self.labels is not None:
            self._vocab = list(self.labels)
        elif self.labels_file is not None:
            self._vocab = load_label_file(self.labels_file, self.label_key)
        elif self.num_labels is not None:
            self._vocab = list(range(self.num_labels))
        else:
            raise StageError("labels: give `labels`, `labels_file` or `num_labels`")

    def vocab_gaps(self) -> list[int]:
        """Integers missing inside the range of an integer-like vocabulary."""
        self.setup()
        assert self._vocab is not None
        if not self._vocab or not all(_is_int_like(v) for v in self._vocab):
            return []
        ids = sorted({int(v) for v in self._vocab})
        return sorted(set(range(ids[0], ids[-1] + 1)) - set(ids))

    def process(self, batch: pa.RecordBatch, ctx: BatchContext) -> BatchResult:
        self.setup()
        assert self._vocab is not None
        vocab = self._vocab
        col = batch.column(batch.schema.get_field_index(self.field)) \
            if self.field in batch.schema.names else None
        if col is None:
            raise StageError(f"labels: no column {self.field!r}")
        vocab_str = all(isinstance(v, str) for v in vocab)
        col = typed_nulls(col, pa.string() if vocab_str else pa.int64(),
                          lists=self.kind != "single")
        found = Findings(self.name)
        is_list = pa.types.is_list(col.type) or pa.types.is_large_list(col.type)
        if is_list:
            values = pc.list_flatten(col)
            owner = pc.list_parent_indices(col).to_numpy(zero_copy_only=False)
        else:
            values, owner = col, np.arange(batch.num_rows)
        data_str = is_utf8(values.type)
        data_int = pa.types.is_integer(values.type)
        mismatch = (data_int and vocab_str) or (data_str and not vocab_str)
        if mismatch:
            keys = pa.array([str(v) for v in vocab], pa.string())
            cmp = pc.cast(values, pa.string())
            found.add(np.unique(owner[np.asarray(pc.is_valid(values))]), "label_type_mismatch",
                      self.action_of("label_type_mismatch"), field=self.field,
                      detail=f"labels are {values.type} in the data but "
                             f"{'strings' if vocab_str else 'integers'} in the vocabulary")
        else:
            keys = pa.array(vocab)
            cmp = values if not data_str else pc.cast(values, pa.string())
            if data_str:
                keys = keys.cast(pa.string())
        null = np.asarray(pc.is_null(cmp).to_numpy(zero_copy_only=False), dtype=bool)
        known = np.asarray(pc.fill_null(pc.is_in(cmp, value_set=keys), False)
                           .to_numpy(zero_copy_only=False), dtype=bool)
        if self.kind == "token" and data_int:
            known |= np.asarray(pc.fill_null(pc.equal(values, -100), False)
                                .to_numpy(zero_copy_only=False), dtype=bool)
        unknown = ~known & ~null
        unk_vals = cmp.filter(pa.array(unknown)).to_pylist()
        if unknown.any():
            found.add(owner[unknown], "unknown_label", self.action_of("unknown_label"),
                      field=self.field, detail=[f"{v!r} not in the label vocabulary"
                                                for v in unk_vals])
        row_null = np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        if is_list:
            row_null |= np.bincount(owner[null], minlength=batch.num_rows) > 0
        else:
            row_null = null
        found.add(row_null, "null_label", self.action_of("null_label"), field=self.field,
                  detail="label is null")
        out_batch = None
        if self.id_field is not None and not is_list:
            out_batch = self._ids(batch, cmp, keys, found)
        hist = Counter(str(v) for v in cmp.filter(pa.array(known)).to_pylist())
        metrics: dict[str, Any] = {
            pub.LABELS: dict(hist),
            "unknown_labels": dict(Counter(str(v) for v in unk_vals)),
            "unknown": int(unknown.sum()),
            "null": int(row_null.sum()),
        }
        gaps = self.vocab_gaps()
        if gaps:
            metrics["ids_missing_from_label_file"] = {str(g): 1 for g in gaps}
        return BatchResult(out_batch, found, metrics)

    def _ids(self, batch: pa.RecordBatch, cmp: pa.Array, keys: pa.Array,
             found: Findings) -> pa.RecordBatch | None:
        ids = pc.index_in(cmp, value_set=keys)
        idx = batch.schema.get_field_index(self.id_field)
        if idx < 0:
            return batch.append_column(self.id_field, ids.cast(pa.int64()))
        given = pc.cast(batch.column(idx), pa.int64())
        bad = pc.fill_null(pc.not_equal(given, pc.cast(ids, pa.int64())), True)
        bad = pc.and_(bad, pc.is_valid(ids))
        mask = np.asarray(bad.to_numpy(zero_copy_only=False), dtype=bool)
        found.add(mask, "label_id_mismatch", self.action_of("label_id_mismatch"),
                  field=self.id_field, detail=[
                      f"id {g} but the vocabulary gives {w}" for g, w in zip(
                          given.filter(pa.array(mask)).to_pylist(),
                          ids.filter(pa.array(mask)).to_pylist(), strict=True)])
        return None
