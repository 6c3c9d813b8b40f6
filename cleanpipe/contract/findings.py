"""What a stage hands back: the :class:`Action` a check takes, its :class:`Findings` (column
by column, never a Python object per row), and the :class:`TextResult` / :class:`BatchResult`
of one call. The engine, not the stage, turns these into quarantined rows and report counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np
import pyarrow as pa

from cleanpipe.contract.published import RowValues


class Action(str, Enum):
    """What happens to a row when a check fires.

    * ``fix``: rewrite the value and keep the row;
    * ``drop``: move the row, unchanged, to the quarantine;
    * ``flag``: keep the row as it is and record the finding;
    * ``fail``: keep the row, record the finding, and make the gate fail.
    """

    FIX = "fix"
    DROP = "drop"
    FLAG = "flag"
    FAIL = "fail"

    def __str__(self) -> str:
        return self.value


@dataclass
class FindingChunk:
    """One call of :meth:`Findings.add`: many positions sharing one code and action."""

    positions: np.ndarray
    code: str
    action: Action
    field: str | None
    detail: list[str | None] | None
    before: list[str | None] | None
    after: list[str | None] | None


def _as_positions(positions: Any) -> np.ndarray:
    if isinstance(positions, np.ndarray) and positions.dtype == bool:
        return np.flatnonzero(positions).astype(np.int64)
    if isinstance(positions, (pa.Array, pa.ChunkedArray)):
        arr = positions.to_numpy(zero_copy_only=False)
        if arr.dtype == bool:
            return np.flatnonzero(arr).astype(np.int64)
        return arr.astype(np.int64)
    return np.asarray(positions, dtype=np.int64).reshape(-1)


def _per_position(value: Any, n: int, name: str) -> list[str | None] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value] * n
    if isinstance(value, (pa.Array, pa.ChunkedArray)):
        value = value.to_pylist()
    out = list(value)
    if len(out) != n:
        raise ValueError(f"{name} has {len(out)} entries for {n} positions")
    return out


@dataclass
class Findings:
    """Columnar record of what a stage found in one batch (or one flat string array).

    Positions index the array or batch the stage was given. Example::

        >>> import numpy as np
        >>> f = Findings("invisible_chars")
        >>> f.add(np.array([0, 3]), "zero_width", Action.FIX, detail=["U+200B", "U+FEFF"])
        >>> f.count("zero_width"), f.positions(Action.FIX).tolist()
        (2, [0, 3])
    """

    stage: str
    chunks: list[FindingChunk] = field(default_factory=list)

    def add(
        self,
        positions: Any,
        code: str,
        action: Action | str,
        *,
        field: str | None = None,
        detail: str | Sequence[str | None] | pa.Array | None = None,
        before: Sequence[str | None] | pa.Array | None = None,
        after: Sequence[str | None] | pa.Array | None = None,
    ) -> None:
        """Record ``code`` at ``positions`` (int indices, or a boolean mask).

        ``detail``/``before``/``after`` are one string per position (or one ``detail`` string
        for all). Keep ``before``/``after`` to rows worth showing: the engine keeps only a few
        examples per code, but the lists are built before that.
        """
        pos = _as_positions(positions)
        if pos.size == 0:
            return
        n = int(pos.size)
        self.chunks.append(
            FindingChunk(
                positions=pos,
                code=code,
                action=Action(action),
                field=field,
                detail=_per_position(detail, n, "detail"),
                before=_per_position(before, n, "before"),
                after=_per_position(after, n, "after"),
            )
        )

    def extend(self, other: Findings, position_map: np.ndarray | None = None) -> None:
        """Append ``other``'s chunks, mapping positions through ``position_map`` if given."""
        for c in other.chunks:
            pos = c.positions if position_map is None else position_map[c.positions]
            self.chunks.append(
                FindingChunk(pos, c.code, c.action, c.field, c.detail, c.before, c.after)
            )

    def with_field(self, field_name: str) -> Findings:
        """A copy in which chunks without a field name get ``field_name``."""
        out = Findings(self.stage)
        for c in self.chunks:
            out.chunks.append(
                FindingChunk(
                    c.positions, c.code, c.action, c.field or field_name, c.detail, c.before,
                    c.after,
                )
            )
        return out

    def positions(self, *actions: Action) -> np.ndarray:
        """Unique sorted positions hit by any of ``actions`` (all actions when none given)."""
        parts = [c.positions for c in self.chunks if not actions or c.action in actions]
        if not parts:
            return np.zeros(0, dtype=np.int64)
        return np.unique(np.concatenate(parts))

    def count(self, code: str | None = None) -> int:
        return int(sum(c.positions.size for c in self.chunks if code is None or c.code == code))

    def codes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.chunks:
            out[c.code] = out.get(c.code, 0) + int(c.positions.size)
        return out

    def __bool__(self) -> bool:
        return bool(self.chunks)


@dataclass
class TextResult:
    """What a :class:`TextStage` returns for one flat string array."""

    texts: pa.Array
    findings: Findings
    metrics: dict[str, Any] = field(default_factory=dict)


@dataclass
class BatchResult:
    """What a :class:`BatchStage` (or :meth:`GlobalStage.decide`) returns for one batch.

    ``batch`` is the rewritten batch (same rows, same order; ``None`` when unchanged).
    Dropping is never done by the stage itself: record a finding with ``Action.DROP``.
    ``metrics`` are numbers or nested dicts of numbers that the engine sums over batches
    (histograms, totals) into the stage's section of the report.

    ``per_row`` (a batch stage's; ``decide`` gives none) holds the stage's "after" figures
    (:data:`~cleanpipe.contract.published.AFTER`) row by row, one value per row of the
    batch as the stage passes it on (a rewritten row as rewritten). ``metrics`` still has
    them summed over the rows the stage passes on (the figure of the stage used alone); the
    engine reports instead the sum over the rows the run writes, which later stages (a
    global dedup) may have thinned.
    """

    batch: pa.RecordBatch | None
    findings: Findings
    metrics: dict[str, Any] = field(default_factory=dict)
    per_row: dict[str, RowValues] = field(default_factory=dict)


def merge_metrics(into: dict[str, Any], new: dict[str, Any]) -> None:
    """Sum nested dicts of numbers (histograms, totals)."""
    for k, v in new.items():
        if isinstance(v, dict):
            merge_metrics(into.setdefault(k, {}), v)
        elif isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
            into[k] = into.get(k, 0) + (v.item() if hasattr(v, "item") else v)
        else:
            # non-numeric values (a vocabulary size, a tokenizer name) are kept as the last seen
            into[k] = v
