"""What reading a batch found, counted on the driver when the batch's results are merged.

A batch is read (parsed, its rows numbered) on the driver or, for a big JSON Lines file, in
the worker that cleans it (:class:`cleanpipe.engine.reading.PieceRead`). Either way the batch
carries :class:`ReadNotes`, and the driver adds them to the run's counters in input order
(:func:`record`), so the read counters, the reader's examples and their order are the same
wherever a batch was parsed.

    >>> import pyarrow as pa
    >>> from cleanpipe.engine.core import RunState
    >>> from cleanpipe.engine.progress import Progress
    >>> from cleanpipe.io.readers import BadRecord
    >>> state = RunState([])
    >>> notes = ReadNotes("a.jsonl", 2, [BadRecord("a.jsonl", 3, "parse_error", "oops", "{x")],
    ...                   [], {}, pa.schema([("text", pa.string())]), ["text"])
    >>> record(state, notes, Progress(enabled=False))
    >>> state.read, state.read_codes, state.read_examples[0]["row_id"]
    (3, {'parse_error': 1}, 'a.jsonl:3')
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from cleanpipe.engine.progress import Progress
from cleanpipe.io.readers import BadRecord, ReadFix
from cleanpipe.io.schemas import check_fields_seen

if TYPE_CHECKING:
    from cleanpipe.engine.core import RunState

#: examples of each reader's code in the report
EXAMPLES = 5
#: characters of an unreadable record's raw text an example shows
EXAMPLE_CHARS = 300


@dataclass
class FixNote:
    """One kind of change the reader made to rows of the batch (``io.readers.ReadFix``):
    how many events, and the row ids of the first few (the report's examples)."""

    code: str
    field: str | None
    detail: str
    events: int
    first_ids: list[str]


@dataclass
class ReadNotes:
    """What reading one batch of shard ``shard`` found."""

    shard: str
    rows: int  # records read into the batch
    bad: list[BadRecord]  # records that could not be read (raw text cut to an example's)
    fixes: list[FixNote]
    fix_rows: dict[str, int]  # rows changed, per fix code
    schema: pa.Schema | None  # the batch's schema when it has columns
    columns: list[str]  # columns of a batch with rows


def notes_of(shard: str, rows: int, bad: list[BadRecord], fixes: list[ReadFix], ids: pa.Array,
             schema: pa.Schema) -> ReadNotes:
    """The notes of a batch of ``rows`` records (ids ``ids``) of ``shard`` with the reader's
    ``bad`` records and ``fixes`` (positions in the batch)."""
    fix_rows = {code: int(np.unique(np.concatenate([f.rows for f in fixes if f.code == code])).size)
                for code in dict.fromkeys(f.code for f in fixes)}  # rows changed, per code
    return ReadNotes(
        shard, rows,
        [replace(b, raw=(b.raw or "")[:EXAMPLE_CHARS]) for b in bad],
        [FixNote(f.code, f.field, f.detail, int(f.rows.size),
                 ids.take(pa.array(f.rows[:EXAMPLES])).to_pylist()) for f in fixes],
        fix_rows, schema if len(schema) else None, schema.names if rows else [])


def record(state: RunState, notes: ReadNotes, progress: Progress) -> None:
    """Add one batch's notes to the run's counters (batches in input order).

    Examples of the reader's fixes follow the shard's unreadable records, wherever in the
    file those are found: they wait until the next shard starts (or :func:`finish`)."""
    if state.reading_shard != notes.shard:
        _flush(state)
        state.reading_shard = notes.shard
    state.read += notes.rows + len(notes.bad)
    for b in notes.bad:
        state.read_codes[b.code] = state.read_codes.get(b.code, 0) + 1
        if sum(1 for e in state.read_examples if e["code"] == b.code) < EXAMPLES:
            state.read_examples.append({
                "stage": "read", "code": b.code, "action": "drop",
                "row_id": f"{b.shard}:{b.line}", "field": None,
                "detail": b.message, "before": b.raw, "after": None})
    for f in notes.fixes:
        state.read_fixes.setdefault(f.code, [0, 0])[0] += f.events
        shown = sum(1 for e in (*state.read_examples, *state.fix_examples)
                    if e["code"] == f.code)
        for rid in f.first_ids[:max(0, EXAMPLES - shown)]:
            state.fix_examples.append({
                "stage": "read", "code": f.code, "action": "fix", "row_id": rid,
                "field": f.field, "detail": f.detail, "before": None, "after": None})
    for code, n in notes.fix_rows.items():
        state.read_fixes[code][1] += n
    if state.input_schema is None and notes.schema is not None:
        # an empty file with a header still says what an empty output looks like
        state.input_schema = notes.schema
    state.columns_seen.update(notes.columns)
    progress.advance_rows(notes.rows)


def finish(state: RunState, fields: list[str] | None) -> None:
    """Once every batch was recorded: the last shard's fix examples, and the check that
    each configured text field is in some file (one in none is a typo)."""
    _flush(state)
    if fields and state.columns_seen:
        check_fields_seen(fields, state.columns_seen)


def _flush(state: RunState) -> None:
    state.read_examples.extend(state.fix_examples)
    state.fix_examples.clear()
