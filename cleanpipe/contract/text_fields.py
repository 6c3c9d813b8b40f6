"""A text stage run over a batch's text fields: each field flattened to one string array,
transformed, and rebuilt in place (nested selectors such as ``messages[*].content`` too).

The engine and a stage used on its own (:mod:`~cleanpipe.contract.standalone`) both run text
stages this way, so a stage gives the same result wherever it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from cleanpipe.contract.findings import Findings, merge_metrics
from cleanpipe.fields import FieldError, flatten_field, rebuild_field, selector_root

if TYPE_CHECKING:
    from cleanpipe.contract.stage import TextStage


def field_present(batch: pa.RecordBatch, selector: str) -> bool:
    """Whether ``batch`` has the column a field selector (``messages[*].content``) starts at."""
    return batch.schema.get_field_index(selector_root(selector)) >= 0


def run_text_stage(stage: TextStage, data: pa.RecordBatch, text_fields: list[str],
                   shard: str | None = None) -> tuple[pa.RecordBatch, Findings, dict[str, Any]]:
    """Run ``stage`` on each of its fields (else ``text_fields``) of ``data``: the rewritten
    batch, the findings (positions are rows of ``data``) and the summed metrics. A field
    missing from ``shard`` (the file the rows came from) is an error naming that file."""
    findings = Findings(stage.name)
    metrics: dict[str, Any] = {}
    for f in stage.fields or text_fields:
        if shard is not None and not field_present(data, f):
            raise FieldError(
                f"{shard}: text field {f!r} is not in this file; columns: "
                f"{', '.join(data.schema.names)}; name the text fields every file has with"
                " fields: (or --fields), or clean such files in a separate run"
            )
        values, positions = flatten_field(data, f)
        res = stage.transform(values)
        if res.texts is not values:
            data = rebuild_field(data, f, res.texts)
        findings.extend(res.findings.with_field(f), position_map=positions)
        merge_metrics(metrics, res.metrics)
    return data, findings, metrics
