"""Apply one stage to one batch of rows: run it, act on its findings, count what happened.

This is shared by every executor (local processes, Ray): an executor only decides where
:func:`apply_stateless` runs and in which order results are merged.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cleanpipe.contract.findings import merge_metrics
from cleanpipe.contract.published import AFTER, RowValues
from cleanpipe.contract.stage import (
    Action,
    BatchContext,
    BatchStage,
    FindingChunk,
    Findings,
    GlobalStage,
    Stage,
    TextStage,
)
from cleanpipe.contract.text_fields import field_present, run_text_stage
from cleanpipe.engine.rows import QuarantineRows, RowFigures, Rows
from cleanpipe.fields import FieldError, flatten_field

MAX_EXAMPLES = 5
#: Histogram edges (characters per row, all text fields together): powers of two.
CHAR_EDGES = [0, *[2 ** k for k in range(3, 21)]]


@dataclass(kw_only=True)
class StageCounts:
    """Row counters and seconds of one stage, shared by a batch's figures and the run's."""

    rows_in: int = 0
    rows_out: int = 0
    changed: int = 0
    dropped: int = 0
    flagged: int = 0
    failed: int = 0
    seconds: float = 0.0
    codes: dict[str, list[Any]] = field(default_factory=dict)  # code -> [action, events, rows]
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True)
class StageBatchStats(StageCounts):
    """Counters of one stage over one batch; summed by :class:`StageStats`."""

    examples: list[dict[str, Any]] = field(default_factory=list)
    events: pa.Table | None = None


@dataclass
class StageStats(StageCounts):
    name: str
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, s: StageBatchStats) -> None:
        self.rows_in += s.rows_in
        self.rows_out += s.rows_out
        self.changed += s.changed
        self.dropped += s.dropped
        self.flagged += s.flagged
        self.failed += s.failed
        self.seconds += s.seconds
        for code, (action, events, rows) in s.codes.items():
            c = self.codes.setdefault(code, [action, 0, 0])
            c[1] += events
            c[2] += rows
        for ex in s.examples:
            lst = self.examples.setdefault(ex["code"], [])
            if len(lst) < MAX_EXAMPLES:
                lst.append(ex)
        merge_metrics(self.metrics, s.metrics)


def _snippet(v: Any, limit: int = 300) -> str | None:
    if v is None:
        return None
    s = str(v)
    return s if len(s) <= limit else s[:limit] + "…"


def _texts_present(batch: pa.RecordBatch, fields: list[str]
                   ) -> Iterator[tuple[pa.Array, np.ndarray]]:
    """Flattened strings of those ``fields`` this batch has (for counts and snippets)."""
    for f in fields:
        if not field_present(batch, f):
            continue
        try:
            yield flatten_field(batch, f)
        except FieldError:
            continue


def _row_text(batch: pa.RecordBatch, pos: int, fields: list[str]) -> str | None:
    """The text of one row (its fields joined), for examples whose stage gave no snippet."""
    parts = []
    for values, _ in _texts_present(batch.slice(pos, 1), fields):
        parts.extend(v for v in values.to_pylist() if v)
    return _snippet(" | ".join(parts)) if parts else None


def summarize(stage: Stage, findings: Findings, rows: Rows, n_in: int,
              n_out: int, seconds: float, metrics: dict[str, Any],
              text_fields: list[str] | None = None) -> StageBatchStats:
    """Counters, bounded examples and the event table of one stage over one batch."""
    st = StageBatchStats(rows_in=n_in, rows_out=n_out, metrics=metrics, seconds=seconds)
    st.changed = int(findings.positions(Action.FIX).size)
    st.dropped = int(findings.positions(Action.DROP).size)
    st.flagged = int(findings.positions(Action.FLAG).size)
    st.failed = int(findings.positions(Action.FAIL).size)
    ev_rows, ev_code, ev_action, ev_field, ev_detail = [], [], [], [], []
    per_code_rows: dict[str, list[np.ndarray]] = {}
    ids = rows.row_ids
    for c in findings.chunks:
        entry = st.codes.setdefault(c.code, [c.action.value, 0, 0])
        entry[1] += int(c.positions.size)
        per_code_rows.setdefault(c.code, []).append(c.positions)
        ev_rows.append(c.positions)
        ev_code.append(np.full(c.positions.size, c.code, dtype=object))
        ev_action.append(np.full(c.positions.size, c.action.value, dtype=object))
        ev_field.append(np.full(c.positions.size, c.field, dtype=object))
        ev_detail.append(np.asarray(c.detail if c.detail is not None
                                    else [None] * c.positions.size, dtype=object))
    for c, j in _first_findings(findings):
        p = int(c.positions[j])
        st.examples.append({
            "stage": stage.name, "code": c.code, "action": c.action.value,
            "row_id": ids[p].as_py(), "field": c.field,
            "detail": _snippet(c.detail[j]) if c.detail is not None else None,
            "before": (_snippet(c.before[j]) if c.before is not None else
                       _row_text(rows.orig, p, [c.field] if c.field else
                                 list(text_fields or []))),
            "after": _snippet(c.after[j]) if c.after is not None else None,
        })
    for code, parts in per_code_rows.items():
        st.codes[code][2] = int(np.unique(np.concatenate(parts)).size)
    if ev_rows:
        pos = np.concatenate(ev_rows)
        st.events = pa.table({
            "row_id": ids.take(pa.array(pos)),
            "seq": pa.array(rows.seq[pos], pa.int64()),
            "stage": pa.array(np.full(pos.size, stage.name, dtype=object), pa.string()),
            "code": pa.array(np.concatenate(ev_code), pa.string()),
            "action": pa.array(np.concatenate(ev_action), pa.string()),
            "field": pa.array(np.concatenate(ev_field), pa.string()),
            "detail": pa.array(np.concatenate(ev_detail), pa.string()),
        })
    return st


def _first_findings(findings: Findings) -> list[tuple[FindingChunk, int]]:
    """Each code's first :data:`MAX_EXAMPLES` findings in row order (ties: the order the stage
    reported them), as ``(chunk, index)``: the report's examples then do not depend on where
    the batches were cut, since batches come in row order too."""
    by_code: dict[str, list[tuple[int, int, int]]] = {}
    for ci, c in enumerate(findings.chunks):
        first = np.argsort(c.positions, kind="stable")[:MAX_EXAMPLES]
        by_code.setdefault(c.code, []).extend(
            (int(c.positions[j]), ci, int(j)) for j in first)
    return [(findings.chunks[ci], j) for hits in by_code.values()
            for _, ci, j in sorted(hits)[:MAX_EXAMPLES]]


def apply_findings(stage: Stage, rows: Rows, findings: Findings,
                   flag_codes: bool) -> tuple[Rows, QuarantineRows | None]:
    """Remove the rows with a ``drop`` finding; keep flag codes per row when asked."""
    n = rows.num_rows
    if flag_codes and findings:
        flags = rows.flags if rows.flags is not None else np.empty(n, dtype=object)
        for c in findings.chunks:
            if c.action in (Action.FLAG, Action.FAIL):
                for p in c.positions.tolist():
                    cur = flags[p]
                    if cur is None:
                        flags[p] = [c.code]
                    elif c.code not in cur:
                        cur.append(c.code)
        rows.flags = flags
    drop = findings.positions(Action.DROP)
    if drop.size == 0:
        return rows, None
    reasons: dict[int, list[str]] = {}
    details: dict[int, list[str]] = {}
    for c in findings.chunks:
        if c.action is not Action.DROP:
            continue
        for j, p in enumerate(c.positions.tolist()):
            r = reasons.setdefault(p, [])
            if c.code not in r:
                r.append(c.code)
            d = c.detail[j] if c.detail is not None else None
            if d:
                details.setdefault(p, []).append(f"{c.code}: {d}")
    keep = np.ones(n, dtype=bool)
    keep[drop] = False
    idx = pa.array(drop)
    q = QuarantineRows(
        orig=rows.orig.take(idx),
        row_ids=rows.row_ids.take(idx).to_pylist(),
        seq=rows.seq[drop],
        stage=stage.name,
        reasons=[reasons[p] for p in drop.tolist()],
        details=[details.get(p, []) for p in drop.tolist()],
    )
    return rows.take_mask(keep), q


Applied = tuple[Rows, "QuarantineRows | None", StageBatchStats]


def _act(stage: Stage, rows: Rows, data: pa.RecordBatch, findings: Findings,
         metrics: dict[str, Any], text_fields: list[str], flag_codes: bool,
         t0: float, index: int, per_row: dict[str, RowValues] | None = None) -> Applied:
    """Take the stage's rewritten batch, act on its findings and count them. The figures
    earlier stages measured go stale on the rows this one rewrites; the stage's own
    ``per_row`` figures (stage ``index``) travel with the rows it keeps, in place of its
    batch metrics of the same names (:class:`~cleanpipe.engine.rows.RowFigures`)."""
    n_in = rows.num_rows
    figures = rows.figures
    if figures is not None:
        fixed = findings.positions(Action.FIX)
        if fixed.size:
            figures = figures.changed(fixed)
    if per_row:
        if not set(per_row) <= AFTER:
            raise TypeError(f"{stage.name}: per_row holds {sorted(set(per_row) - AFTER)},"
                            f" not figures of the rows passed on ({sorted(AFTER)})")
        figures = (figures or RowFigures()).measured(index, per_row)
        metrics = {k: v for k, v in metrics.items() if k not in per_row}
    rows = dataclasses.replace(rows, data=data, figures=figures)
    kept, q = apply_findings(stage, rows, findings, flag_codes)
    stats = summarize(stage, findings, rows, n_in, kept.num_rows,
                      time.perf_counter() - t0, metrics, text_fields)
    return kept, q, stats


def apply_stage(stage: Stage, rows: Rows, text_fields: list[str],
                flag_codes: bool = False, *, index: int) -> Applied:
    """Run a stateless stage (text or batch; the pipeline's stage ``index``) on ``rows``."""
    t0 = time.perf_counter()
    if rows.num_rows == 0:
        return rows, None, StageBatchStats()
    per_row = None
    if isinstance(stage, TextStage):
        data, findings, metrics = run_text_stage(stage, rows.data, text_fields, rows.shard)
    elif isinstance(stage, BatchStage):
        res = stage.process(rows.data, BatchContext(rows.data, text_fields, rows.row_ids))
        data = res.batch if res.batch is not None else rows.data
        findings, metrics, per_row = res.findings, res.metrics, res.per_row
    else:  # pragma: no cover - the engine routes global stages elsewhere
        raise TypeError(f"{stage.name} is not a stateless stage")
    return _act(stage, rows, data, findings, metrics, text_fields, flag_codes, t0, index,
                per_row)


def apply_decide(stage: GlobalStage, rows: Rows, text_fields: list[str],
                 flag_codes: bool = False, *, index: int) -> Applied:
    """Second pass of a global stage (the pipeline's stage ``index``) on ``rows``."""
    t0 = time.perf_counter()
    if rows.num_rows == 0:
        return rows, None, StageBatchStats()
    res = stage.decide(rows.data, rows.seq, BatchContext(rows.data, text_fields, rows.row_ids))
    data = res.batch if res.batch is not None else rows.data
    return _act(stage, rows, data, res.findings, res.metrics, text_fields, flag_codes, t0,
                index)


def histogram_of(counts: np.ndarray) -> list[int]:
    bins = np.searchsorted(np.asarray(CHAR_EDGES[1:]), counts, side="right")
    return np.bincount(bins, minlength=len(CHAR_EDGES)).tolist()


def char_counts(batch: pa.RecordBatch, text_fields: list[str],
                per_field: dict[str, dict[str, int]] | None = None) -> np.ndarray:
    """Characters per row, all present text fields added up; with ``per_field``, each
    field's :func:`field_char_stats` are added into it on the way."""
    n = batch.num_rows
    total = np.zeros(n, dtype=np.int64)
    for f in text_fields:
        for values, positions in _texts_present(batch, [f]):
            lens = pc.fill_null(pc.utf8_length(values), 0).to_numpy(zero_copy_only=False)
            total += np.bincount(positions, weights=lens, minlength=n).astype(np.int64)
            if per_field is not None:
                merge_field_stats(per_field, {f: field_char_stats(lens)})
    return total


def field_char_stats(lengths: np.ndarray) -> dict[str, int]:
    """Strings, empty (or null) strings, characters and the longest string's characters of
    one text field (nested fields count each string, e.g. each message).

        >>> field_char_stats(np.array([3, 0, 10]))
        {'strings': 3, 'empty': 1, 'chars': 13, 'max_chars': 10}
    """
    return {"strings": int(lengths.size), "empty": int((lengths == 0).sum()),
            "chars": int(lengths.sum()), "max_chars": int(lengths.max(initial=0))}


def merge_field_stats(into: dict[str, dict[str, int]], new: dict[str, dict[str, int]]) -> None:
    """Add per-field :func:`field_char_stats` (the longest: the larger)."""
    for f, st in new.items():
        cur = into.setdefault(f, dict.fromkeys(st, 0))
        for k, v in st.items():
            cur[k] = max(cur[k], v) if k == "max_chars" else cur[k] + v
