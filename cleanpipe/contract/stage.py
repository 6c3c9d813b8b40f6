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
  ``finalize`` → ``decide`` (per batch, second pass). A distributed engine may run a
  grouping of its own in place of ``observe`` and ``finalize`` where the stage declares one
  (``distributed_grouping``), and hands the outcome back through ``adopt_grouping`` and
  ``with_decisions``; a stage that declares none runs on every engine as it is.

Every change, drop and flag a stage makes is recorded in a :class:`Findings` object, column
by column (never a Python object per row), as ``(position, code, action, field, detail,
before, after)``. The engine, not the stage, turns positions into row ids, moves dropped rows
to the quarantine and counts everything for the report (:mod:`~cleanpipe.contract.findings`;
what a batch stage may ask of the engine is :mod:`~cleanpipe.contract.batch_context`; both
are importable from here too).

Each stage declares its check codes and their default actions in ``codes``; a pipeline may
override them all with ``action:`` or one at a time with ``actions: {code: action}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, model_validator

from cleanpipe.contract.batch_context import BatchContext, FlatTexts
from cleanpipe.contract.findings import Action, BatchResult, FindingChunk, Findings, TextResult
from cleanpipe.contract.published import RowValues, Summary, summary_of
from cleanpipe.errors import CleanpipeError

__all__ = [
    "Action", "BatchContext", "BatchResult", "BatchStage", "ExampleCount", "FindingChunk",
    "Findings", "FlatTexts", "GlobalStage", "Stage", "StageError", "TextResult", "TextStage",
]

#: ``examples:`` of a stage: before/after examples kept per code per batch
ExampleCount = Annotated[int, Field(ge=0, le=1000)]


class StageError(CleanpipeError, ValueError):
    """A stage cannot run with the parameters or data it was given (message for the user):
    exit code 2."""


class Stage(BaseModel):
    """Base of every stage: a named, validated set of parameters.

    Subclasses set ``name`` (the key used in pipeline files), ``codes`` (each check code and
    its default action) and a docstring whose first line is the summary ``cleanpipe stages``
    prints.
    """

    # NaN and infinity are refused: no threshold, range or weight means anything as either.
    # A class's validator is built when it is first instantiated, not when it is defined:
    # importing one stage then builds nothing for the base classes, which nothing instantiates.
    # Parameters are documented by the docstring under them, read only when shown
    # (:mod:`cleanpipe.contract.parameter_docs`: pydantic's own reading cost every import).
    model_config = ConfigDict(extra="forbid", frozen=False, arbitrary_types_allowed=True,
                              allow_inf_nan=False, defer_build=True)

    name: ClassVar[str] = ""
    codes: ClassVar[Mapping[str, Action]] = {}
    #: Actions a code may not take (e.g. a check that cannot "fix").
    forbidden_actions: ClassVar[Mapping[str, frozenset[Action]]] = {}
    #: Parameters that change where or how fast the stage works, never its results (a spill
    #: folder): left out of the pipeline's config hash.
    execution_params: ClassVar[frozenset[str]] = frozenset()
    #: Distributions and totals this stage publishes for the report (names from
    #: :mod:`cleanpipe.contract.published`); :meth:`summary` returns exactly these.
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
        :mod:`cleanpipe.contract.published`)."""
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
        from cleanpipe.contract.standalone import apply_text_stage

        return apply_text_stage(self, data)


class BatchStage(Stage):
    """A stage that checks (or rewrites) whole record batches."""

    def process(self, batch: pa.RecordBatch, ctx: BatchContext) -> BatchResult:  # pragma: no cover
        raise NotImplementedError

    def measure_rows(self, batch: pa.RecordBatch) -> dict[str, RowValues]:
        """The ``per_row`` figures of ``batch``'s rows exactly as they are, rewriting none.

        The engine calls it on rows a later stage rewrote after this one measured them
        (their measured values are stale) before it totals the rows written. The default
        is ``process``'s own ``per_row``: right for a stage that rewrites nothing. A stage
        that rewrites rows it measures (``context_length`` truncating) overrides it.

            >>> from cleanpipe.stages.token_ids import TokenIdCheck
            >>> stage = TokenIdCheck(vocab_size=10, attention_mask_field=None)
            >>> b = pa.record_batch({"input_ids": [[1, 2, 3]], "labels": [[-100, 2, 3]]})
            >>> {k: v.values.tolist() for k, v in sorted(stage.measure_rows(b).items())}
            {'supervised_tokens_after': [2], 'tokens_after': [3], 'total_tokens_after': [3]}
        """
        return self.process(batch, BatchContext(batch)).per_row

    def __call__(self, data: Any) -> Any:
        from cleanpipe.contract.standalone import apply_batch_stage

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

    def observe_reads_batch(self) -> bool:
        """Whether ``observe`` reads the batch's columns (the default, as a stage may).

        A stage whose ``observe`` needs only ``prepared``, ``seq`` and ``ctx.row_ids``
        returns ``False``: a distributed engine may then leave each batch where it was
        prepared and hand ``observe`` the batch without its columns (its rows counted).

            >>> GlobalStage().observe_reads_batch()
            True
        """
        return True

    def finalize(self) -> None:
        """Called once after every batch was observed."""

    def decide(self, batch: pa.RecordBatch, seq: np.ndarray,
               ctx: BatchContext) -> BatchResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def report_section(self) -> dict[str, Any]:
        """Extra data for this stage's section of the report (clusters, histograms)."""
        return {}

    # -- hooks for distributed engines (optional) ---------------------------------------
    def distributed_grouping(self) -> str | None:
        """The name of a grouping a distributed engine may run in place of this stage's
        ``observe`` and ``finalize``, or ``None`` (the default).

        With ``None`` every engine calls ``observe`` and ``finalize`` in one process, in
        row order, and has its workers ``decide`` with the finalized stage (or, where
        :meth:`has_decisions_table`, with each batch's decisions): a new global stage runs
        on every engine without more. A stage that names a grouping
        (``exact_dedup``: ``"content_hash"``; ``minhash_dedup``: ``"minhash_lsh"``)
        implements the three hooks below; an engine that has a grouping of that name (the
        Ray engine's ``cleanpipe.engine.ray_dedup.GROUPINGS``) builds it from the stage's
        own public methods, feeds it the ``prepare`` results, and hands the outcome back
        with :meth:`adopt_grouping` and :meth:`with_decisions`; an engine without one
        falls back to ``observe`` and ``finalize``.
        """
        return None

    def adopt_grouping(self, section: dict[str, Any]) -> None:
        """Take the outcome of a grouping an engine ran in place of ``observe`` and
        ``finalize``: ``section`` becomes this stage's report section, and ``decide``
        reports only the decisions given with :meth:`with_decisions` (the stage holds no
        per-row state of its own)."""
        raise NotImplementedError(f"{self.name}: no distributed grouping")

    def has_decisions_table(self) -> bool:
        """Whether :meth:`decisions_for` and :meth:`with_decisions` are implemented: an
        engine may then decide a batch away from the finalized stage, on a copy of the stage
        as configured given the batch's decisions table (``False`` by default).

            >>> GlobalStage().has_decisions_table()
            False
        """
        return False

    def decisions_for(self, seq: np.ndarray) -> pa.Table:
        """What ``decide`` reports for the rows ``seq`` after ``finalize``, as a decisions
        table (``seq``, ``code``, ``detail``: :data:`cleanpipe.contract.decisions.DECISIONS`)."""
        raise NotImplementedError(f"{self.name}: no decisions table")

    def with_decisions(self, decisions: pa.Table) -> GlobalStage:
        """A copy whose ``decide`` reports ``decisions`` (a :meth:`decisions_for` table
        computed elsewhere, e.g. by a distributed grouping) for the rows it is given."""
        raise NotImplementedError(f"{self.name}: no decisions table")

    def __call__(self, data: Any) -> Any:
        from cleanpipe.contract.standalone import apply_global_stage

        return apply_global_stage(self, data)
