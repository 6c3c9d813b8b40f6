"""``token_ids``: pre-tokenized ``input_ids`` / ``labels`` / ``attention_mask`` columns.

An id ≥ the embedding size is a CUDA device-side assert mid-run; a row whose labels are all
-100 is a NaN loss. The limit is the smaller of the tokenizer's vocabulary (with added
tokens) and the model's ``vocab_size`` from ``config.json``; when both are given and differ,
the report says so (``vocab_size_mismatch`` in the metrics): a tokenizer larger than the
embedding is a bug waiting for the first rare token.

The report gets every row's length (its ``input_ids``) and the supervised tokens (labels other
than ``ignore_index``; without a labels column, every token, as a causal-LM collator copies
``input_ids`` to the labels), of the rows that reach the stage and of those the run writes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, PrivateAttr

from cleanpipe.columns import typed_nulls
from cleanpipe.contract import published as pub
from cleanpipe.contract.batch_context import BatchContext
from cleanpipe.contract.findings import Action, BatchResult, Findings
from cleanpipe.contract.stage import BatchStage, StageError


def _model_vocab(path: str) -> int:
    p = Path(path)
    cfg = json.loads((p / "config.json" if p.is_dir() else p).read_text(encoding="utf-8"))
    v = cfg.get("vocab_size") or (cfg.get("text_config") or {}).get("vocab_size")
    if not isinstance(v, int):
        raise StageError(f"token_ids: no vocab_size in {path}")
    return v


class TokenIdCheck(BatchStage):
    """Check pre-tokenized rows.

        >>> TokenIdCheck(vocab_size=10)({"input_ids": [[1, 2], [3, 12], [4, 5]],
        ...                              "labels": [[-100, 2], [-100, 1], [-100, -100]]})
        {'input_ids': [[1, 2]], 'labels': [[-100, 2]]}
    """

    name = "token_ids"
    codes = {"id_out_of_range": Action.DROP, "label_out_of_range": Action.DROP,
             "length_mismatch": Action.DROP, "all_labels_masked": Action.DROP,
             "bad_attention_mask": Action.DROP}
    forbidden_actions = dict.fromkeys(codes, frozenset({Action.FIX}))
    publishes = frozenset({pub.TOKENS_BEFORE, pub.TOKENS_AFTER, pub.TOTAL_TOKENS_BEFORE,
                           pub.TOTAL_TOKENS_AFTER, pub.SUPERVISED_TOKENS_BEFORE,
                           pub.SUPERVISED_TOKENS_AFTER})

    input_ids_field: str = "input_ids"
    labels_field: str | None = "labels"
    attention_mask_field: str | None = "attention_mask"
    tokenizer: str | None = None
    """tokenizer.json / model directory: its vocabulary size (added tokens included)."""
    config: str | None = None
    """config.json (or its directory): the embedding's ``vocab_size``."""
    vocab_size: int | None = Field(None, ge=1)
    """The embedding size, given directly."""
    ignore_index: int = -100

    def limits(self) -> tuple[int, dict[str, int]]:
        sizes: dict[str, int] = {}
        if self.tokenizer:
            from cleanpipe.templating.tokenizer import LoadedTokenizer

            sizes["tokenizer_vocab_size"] = LoadedTokenizer.load(self.tokenizer).vocab_size
        if self.config:
            sizes["model_vocab_size"] = _model_vocab(self.config)
        if self.vocab_size is not None:
            sizes["vocab_size"] = self.vocab_size
        if not sizes:
            raise StageError("token_ids: give `tokenizer`, `config` or `vocab_size`")
        return min(sizes.values()), sizes

    _limit: tuple[int, dict[str, int]] | None = PrivateAttr(default=None)

    def setup(self) -> None:
        if self._limit is None:
            self._limit = self.limits()

    def _lists(self, batch: pa.RecordBatch, name: str) -> tuple[np.ndarray, np.ndarray,
                                                                 np.ndarray]:
        if name not in batch.schema.names:
            raise StageError(f"token_ids: no column {name!r}")
        col = typed_nulls(batch.column(batch.schema.get_field_index(name)), pa.int64(),
                          lists=True)
        if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)
                or pa.types.is_fixed_size_list(col.type)) \
                or not pa.types.is_integer(col.type.value_type):
            raise StageError(f"token_ids: column {name!r} is {col.type}, not lists of "
                             "integer ids")
        flat = pc.list_flatten(col).to_numpy(zero_copy_only=False)
        owner = pc.list_parent_indices(col).to_numpy(zero_copy_only=False)
        lens = pc.fill_null(pc.list_value_length(col), 0).to_numpy(zero_copy_only=False)
        return flat, owner, lens

    def process(self, batch: pa.RecordBatch, ctx: BatchContext) -> BatchResult:
        self.setup()
        assert self._limit is not None
        limit, sizes = self._limit
        n = batch.num_rows
        found = Findings(self.name)
        ids, owner, lens = self._lists(batch, self.input_ids_field)
        bad = (ids < 0) | (ids >= limit)
        rows = np.unique(owner[bad])
        found.add(rows, "id_out_of_range", self.action_of("id_out_of_range"),
                  field=self.input_ids_field,
                  detail=[f"id {int(ids[bad][owner[bad] == r].max())} outside [0, {limit})"
                          for r in rows])
        metrics = {**sizes, "ids_out_of_range": int(bad.sum())}
        if len(set(sizes.values())) > 1:
            metrics["vocab_size_mismatch"] = 1
        names = batch.schema.names
        supervised = lens
        if self.labels_field and self.labels_field in names:
            lab, lown, llens = self._lists(batch, self.labels_field)
            mism = llens != lens
            found.add(mism, "length_mismatch", self.action_of("length_mismatch"),
                      field=self.labels_field, detail=[
                          f"{a} labels for {b} ids" for a, b in zip(llens[mism], lens[mism],
                                                                   strict=True)])
            lbad = (lab != self.ignore_index) & ((lab < 0) | (lab >= limit))
            found.add(np.unique(lown[lbad]), "label_out_of_range",
                      self.action_of("label_out_of_range"), field=self.labels_field)
            live = np.bincount(lown[lab != self.ignore_index], minlength=n)
            supervised = live
            masked = live == 0
            found.add(masked, "all_labels_masked", self.action_of("all_labels_masked"),
                      field=self.labels_field, detail="every label is -100: loss 0/0 = NaN")
            metrics["all_labels_masked"] = int(masked.sum())
        if self.attention_mask_field and self.attention_mask_field in names:
            am, aown, alens = self._lists(batch, self.attention_mask_field)
            wrong = (alens != lens) | (np.bincount(aown[(am != 0) & (am != 1)],
                                                   minlength=n) > 0)
            found.add(wrong, "bad_attention_mask", self.action_of("bad_attention_mask"),
                      field=self.attention_mask_field,
                      detail="attention_mask is not 0/1 or not as long as input_ids")
        kept = np.ones(n, dtype=bool)
        kept[found.positions(Action.DROP)] = False
        metrics.update({
            pub.TOKENS_BEFORE: pub.histogram_metrics(lens),
            pub.TOKENS_AFTER: pub.histogram_metrics(lens[kept]),
            pub.TOTAL_TOKENS_BEFORE: pub.total_metrics(int(lens.sum())),
            pub.TOTAL_TOKENS_AFTER: pub.total_metrics(int(lens[kept].sum())),
            pub.SUPERVISED_TOKENS_BEFORE: pub.total_metrics(int(supervised.sum())),
            pub.SUPERVISED_TOKENS_AFTER: pub.total_metrics(int(supervised[kept].sum())),
        })
        return BatchResult(None, found, metrics, per_row={
            pub.TOKENS_AFTER: pub.RowValues(lens), pub.TOTAL_TOKENS_AFTER: pub.RowValues(lens),
            pub.SUPERVISED_TOKENS_AFTER: pub.RowValues(supervised)})
