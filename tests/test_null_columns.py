"""A column that holds only nulls in one batch (Arrow type ``null`` from JSON) is judged as
the same nulls are in any other batch: the output may not depend on the batching."""

from __future__ import annotations

import pyarrow as pa
import pytest

from cleanpipe.contract.stage import BatchContext, StageError
from cleanpipe.stages.labels import LabelCheck
from cleanpipe.stages.numeric import NumericCheck
from cleanpipe.stages.token_ids import TokenIdCheck


def _codes(stage, batch: pa.RecordBatch) -> list[set[str]]:
    """The codes found on each row."""
    res = stage.process(batch, BatchContext(batch))
    out: list[set[str]] = [set() for _ in range(batch.num_rows)]
    for chunk in res.findings.chunks:
        for p in chunk.positions.tolist():
            out[p].add(chunk.code)
    return out


@pytest.mark.parametrize(("stage", "column", "value"), [
    (LabelCheck(labels=["neg", "pos"]), "label", "pos"),
    (LabelCheck(num_labels=2), "label", 1),
    (LabelCheck(labels=["a", "b"], kind="multi"), "label", ["a"]),
    (NumericCheck(fields=["score"]), "score", 0.5),
    (TokenIdCheck(vocab_size=10, labels_field=None, attention_mask_field=None),
     "input_ids", [1, 2]),
], ids=["labels-str", "labels-int", "labels-multi", "numeric", "token_ids"])
def test_all_null_batch_judged_like_nulls_in_a_mixed_batch(stage, column, value) -> None:
    mixed = pa.RecordBatch.from_pylist([{column: None}, {column: value}])
    only_null = pa.RecordBatch.from_pylist([{column: None}])
    assert only_null.schema.field(column).type == pa.null()
    assert _codes(stage, only_null) == _codes(stage, mixed)[:1]


def test_token_ids_names_a_missing_or_mistyped_column() -> None:
    stage = TokenIdCheck(vocab_size=10)
    with pytest.raises(StageError, match="no column 'input_ids'"):
        stage.process(pa.record_batch({"text": ["a"]}), BatchContext(pa.record_batch(
            {"text": ["a"]})))
    batch = pa.record_batch({"input_ids": ["1 2"]})
    with pytest.raises(StageError, match="'input_ids' is string, not lists of integer ids"):
        stage.process(batch, BatchContext(batch))
