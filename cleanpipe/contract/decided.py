"""What the two dedup stages share in their second pass: ``decide`` read from a decisions
table, which either the stage's own state or a distributed engine computed.

    >>> from cleanpipe.stages.exact_dedup import ExactDedup
    >>> from cleanpipe.contract.decisions import decisions_table
    >>> t = decisions_table(np.array([4]), ["exact_duplicate"], ["duplicate of row f:1"])
    >>> stage = ExactDedup().with_decisions(t)
    >>> res = stage.decide(pa.record_batch({"text": ["a", "a"]}), np.array([3, 4]), None)
    >>> res.metrics
    {'exact_duplicate': 1, 'contaminated_exact': 0, 'conflicting_labels': 0}
    >>> res.findings.codes()
    {'exact_duplicate': 1}
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

import numpy as np
import pyarrow as pa

from cleanpipe.contract.decisions import DECISIONS, decisions_at
from cleanpipe.contract.stage import BatchResult, Findings

_S = TypeVar("_S", bound="DecidedFromTable")


class DecidedFromTable:
    """Mixin for a global stage with ``decisions_for(seq)`` and a ``_decisions`` private
    attribute; its codes, in report order, are ``decision_codes``."""

    decision_codes: ClassVar[tuple[str, ...]] = ()
    _decisions: pa.Table | None
    _report: dict[str, Any]

    def adopt_grouping(self, section: dict[str, Any]) -> None:
        """:meth:`GlobalStage.adopt_grouping`: ``section`` is the report section, no row is
        decided until :meth:`with_decisions`, and the first pass's per-row state goes."""
        self._report = dict(section)
        self._decisions = DECISIONS.empty_table()
        self.forget_rows()

    def forget_rows(self) -> None:
        """Drop what the first pass kept per row (snippets, hashes, sketches)."""
        raise NotImplementedError

    def has_decisions_table(self) -> bool:
        return True

    def with_decisions(self: _S, decisions: pa.Table) -> _S:
        """A copy whose ``decide`` reports ``decisions`` (computed elsewhere, e.g. by the
        Ray engine's distributed grouping) instead of looking rows up in its own state."""
        out = self.model_copy()  # type: ignore[attr-defined]
        out._decisions = decisions
        return out

    def decide(self, batch: pa.RecordBatch, seq: np.ndarray, ctx: Any) -> BatchResult:
        table = (self._decisions if self._decisions is not None
                 else self.decisions_for(seq))  # type: ignore[attr-defined]
        found = Findings(self.name)  # type: ignore[attr-defined]
        counts = dict.fromkeys(self.decision_codes, 0)
        for code, (pos, details) in decisions_at(table, seq, self.decision_codes).items():
            found.add(pos, code, self.action_of(code),  # type: ignore[attr-defined]
                      detail=details)
            counts[code] = int(pos.size)
        return BatchResult(None, found, counts)
