"""The stage contract: what every stage is, what it returns, and how actions work.

A stage is a pydantic model (typed parameters, validated when a pipeline loads) with one of
three shapes:

* :class:`TextStage` sees one flat string array at a time (the engine flattens nested fields
  such as ``messages[*].content`` and rebuilds them afterwards) and returns the rewritten
  array plus its findings. Stateless: runs in worker processes.
* :class:`BatchStage` sees a whole :class:`pyarrow.RecordBatch` (for checks that need several
  columns: labels, token ids, chat structure, token counts). Stateless.
* :class:`GlobalStage` must see every row before it can decide (deduplication, corpus
  statistics): ``prepare`` (parallel, per batch) → ``observe`` (sequential, in row order) →
  ``finalize`` → ``decide`` (per batch, second pass).

Every change, drop and flag a stage makes is recorded in a :class:`Findings` object, column
by column (never a Python object per row), as ``(position, code, action, field, detail,
before, after)``. The engine, not the stage, turns positions into row ids, moves dropped rows
to the quarantine and counts everything for the report.

Each stage declares its check codes and their default actions in ``codes``; a pipeline may
override them all with ``action:`` or one at a time with ``actions: {code: action}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Annotated, Any, ClassVar

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, model_validator

from cleanpipe.stages.published import Summary, summary_of

#: ``examples:`` of a stage: before/after examples kept per code per batch
ExampleCount = Annotated[int, Field(ge=0, le=1000)]


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
    """

    batch: pa.RecordBatch | None
    findings: Findings
    metrics: dict[str, Any] = field(default_factory=dict)


class StageError(ValueError):
    """A stage cannot run with the parameters or data it was given (message for the user)."""


class Stage(BaseModel):
    """Base of every stage: a named, validated set of parameters.

    Subclasses set ``name`` (the key used in pipeline files), ``codes`` (each check code and
    its default action) and a docstring whose first line is the summary ``cleanpipe stages``
    prints.
    """

    # NaN and infinity are refused: no threshold, range or weight means anything as either
    model_config = ConfigDict(extra="forbid", frozen=False, arbitrary_types_allowed=True,
                              use_attribute_docstrings=True, allow_inf_nan=False)

    name: ClassVar[str] = ""
    codes: ClassVar[Mapping[str, Action]] = {}
    #: Actions a code may not take (e.g. a check that cannot "fix").
    forbidden_actions: ClassVar[Mapping[str, frozenset[Action]]] = {}
    #: Parameters that change where or how fast the stage works, never its results (a spill
    #: folder): left out of the pipeline's config hash.
    execution_params: ClassVar[frozenset[str]] = frozenset()
    #: Distributions and totals this stage publishes for the report (names from
    #: :mod:`cleanpipe.stages.published`); :meth:`summary` returns exactly these.
    publishes: ClassVar[frozenset[str]] = frozenset()

    action: Action | None = None
    """Action for every code of this stage (overrides the defaults)."""
    actions: dict[str, Action] = {}
    """Action per code, e.g. ``{replacement_char: drop}``."""

    @model_validator(mode="after")
    def _check_actions(self) -> Stage:
        for code in self.actions:
            if code not in self.codes:
                valid = ", ".join(sorted(self.codes)) or "(none)"
                raise ValueError(f"unknown code {code!r} in actions; valid codes: {valid}")
        for code in self.codes:
            act = self.action_of(code)
            if act in self.forbidden_actions.get(code, frozenset()):
                raise ValueError(f"code {code!r} cannot take action {act.value!r}")
        return self

    def action_of(self, code: str) -> Action:
        """The action configured for ``code``."""
        if code in self.actions:
            return self.actions[code]
        if self.action is not None:
            return self.action
        return self.codes[code]

    def setup(self) -> None:
        """Load heavy resources (tokenizers, vocabularies). Called once per process before use.

        Must be idempotent; the engine calls it in each worker. Keep loaded objects in private
        attributes so the stage still pickles cheaply.
        """

    def summary(self, metrics: Mapping[str, Any]) -> Summary:
        """The values of :attr:`publishes`, typed, from this stage's ``metrics`` summed over
        every batch of the run (its batches put them there under the same names, see
        :mod:`cleanpipe.stages.published`)."""
        return summary_of(sorted(self.publishes), metrics)

    def describe(self) -> dict[str, Any]:
        """Parameters as plain data, for the report and ``cleanpipe stages``."""
        return self.model_dump(mode="json")


class TextStage(Stage):
    """A stage that rewrites or checks strings, one flat array at a time.

    Standalone use: call it on a ``str``, a list of strings, a pyarrow string array, a polars
    Series, or a ``dict`` batch (as ``datasets.Dataset.map(stage, batched=True)`` passes);
    it returns the same kind with the fixes applied.
    """

    fields: list[str] | None = None
    """Limit this stage to these of the pipeline's text fields (default: all of them)."""

    def transform(self, texts: pa.Array) -> TextResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, data: Any) -> Any:
        from cleanpipe.standalone import apply_text_stage

        return apply_text_stage(self, data)


class BatchStage(Stage):
    """A stage that checks (or rewrites) whole record batches."""

    def process(self, batch: pa.RecordBatch, ctx: BatchContext) -> BatchResult:  # pragma: no cover
        raise NotImplementedError

    def __call__(self, data: Any) -> Any:
        from cleanpipe.standalone import apply_batch_stage

        return apply_batch_stage(self, data)


class GlobalStage(Stage):
    """A stage that must see the whole dataset before deciding (dedup, statistics).

    The engine calls, in order: ``prepare`` on every batch (in worker processes, in any
    order; returns picklable compact data such as hashes), ``observe`` with those results in
    row order, ``finalize`` once, then ``decide`` on every batch again (second pass) to get the
    findings. ``seq`` is each row's global position in read order (int64), stable for a given
    input, so decisions such as "keep the first" are deterministic.
    """

    def prepare(self, batch: pa.RecordBatch, ctx: BatchContext) -> Any:
        return None

    def observe(self, prepared: Any, seq: np.ndarray, batch: pa.RecordBatch,
                ctx: BatchContext) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def finalize(self) -> None:
        """Called once after every batch was observed."""

    def decide(self, batch: pa.RecordBatch, seq: np.ndarray,
               ctx: BatchContext) -> BatchResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def report_section(self) -> dict[str, Any]:
        """Extra data for this stage's section of the report (clusters, histograms)."""
        return {}

    def __call__(self, data: Any) -> Any:
        from cleanpipe.standalone import apply_global_stage

        return apply_global_stage(self, data)


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
        from cleanpipe.fields import flatten_field

        if field_path not in self._cache:
            values, rows = flatten_field(self.batch, field_path)
            self._cache[field_path] = FlatTexts(field_path, values, rows)
        return self._cache[field_path]

    def all_texts(self, fields: Iterable[str] | None = None) -> list[FlatTexts]:
        names = self.text_fields if fields is None else list(fields)
        return [self.texts(f) for f in names]
