"""What stages publish for the report: named distributions and totals, typed.

A stage declares the names it publishes in ``Stage.publishes`` and returns their values from
``Stage.summary(metrics)``; the report reads nothing else about token lengths, labels or
token totals, and its schema lists the same names (:data:`NAMES`). Names are constants
here, shared by the stages that emit them and the report that shows them.

Values travel from the workers as plain numbers in a stage's per-batch ``metrics``, under
the same names, so the engine's merge (a sum of nested dicts) combines them: histograms as
sparse ``{bucket lower edge: rows}`` maps, totals as ``{value, bounded_rows}``. The sum does
not depend on how rows were split into batches or workers. :func:`summary_of` turns the
summed metrics into typed objects: sorted, complete buckets.

An "after" figure (:data:`AFTER`) is about the rows the run writes, which a later stage (a
global dedup) may still drop: a stage returns it per row too (:class:`RowValues`, in
``BatchResult.per_row``), the engine carries those values with the rows it passes on and
totals them over the rows written (:meth:`RowValues.metrics`), in place of the batch's own.

    >>> histogram_metrics([3, 40, 5000], bounded=[False, True, False])
    {'counts': {'0': 1, '32': 1, '4096': 1}, 'bounded': {'32': 1}}
    >>> h = Histogram.from_metrics({"counts": {"4096": 1, "0": 1, "32": 1, "1024": 1},
    ...                             "bounded": {"1024": 1}})
    >>> h.rows, h.bounded_rows, [e for e, c in zip(h.edges, h.counts) if c]
    (4, 1, [0, 32, 1024, 4096])
    >>> Total.from_metrics({"value": 120, "bounded_rows": 0}).to_json()
    {'value': 120, 'bounded_rows': 0}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

# -- names ------------------------------------------------------------------------------------
#: tokens per row, of the rows that reach the stage (the sequence the trainer tokenizes)
TOKENS_BEFORE = "tokens_before"
#: tokens per row, of the rows the run writes (truncated rows at their new length)
TOKENS_AFTER = "tokens_after"
#: rows per label value (valid labels)
LABELS = "labels"
#: occurrences per special-token string found inside the text
SPECIAL_TOKENS = "special_tokens"
#: tokens summed over the rows that reach the stage / over the rows the run writes
TOTAL_TOKENS_BEFORE = "total_tokens_before"
TOTAL_TOKENS_AFTER = "total_tokens_after"
#: supervised tokens (those the loss sees): untruncated, of the rows that reach the stage;
#: within the window, of the rows the run writes
SUPERVISED_TOKENS_BEFORE = "supervised_tokens_before"
SUPERVISED_TOKENS_AFTER = "supervised_tokens_after"
#: rows whose sequence could be built and measured (render errors excluded)
ROWS_MEASURED = "rows_measured"
#: rows longer than the context window, and their share of the measured rows
ROWS_OVER_WINDOW = "rows_over_window"
SHARE_OVER_WINDOW = "share_over_window"

#: Key of a stage's report section holding memory and timing internals: the report shows it
#: in a collapsed diagnostics part, not among the stage's findings.
MEMORY = "memory"


class Kind(str, Enum):
    """The shape of a published value."""

    HISTOGRAM = "histogram"
    TALLY = "tally"
    TOTAL = "total"


#: Every published name and its kind (the report schema lists the same names).
NAMES: Mapping[str, Kind] = {
    TOKENS_BEFORE: Kind.HISTOGRAM, TOKENS_AFTER: Kind.HISTOGRAM,
    LABELS: Kind.TALLY, SPECIAL_TOKENS: Kind.TALLY,
    TOTAL_TOKENS_BEFORE: Kind.TOTAL, TOTAL_TOKENS_AFTER: Kind.TOTAL,
    SUPERVISED_TOKENS_BEFORE: Kind.TOTAL, SUPERVISED_TOKENS_AFTER: Kind.TOTAL,
    ROWS_MEASURED: Kind.TOTAL, ROWS_OVER_WINDOW: Kind.TOTAL, SHARE_OVER_WINDOW: Kind.TOTAL,
}

#: The figures about the rows the stage passes on, which the report gives for the rows the
#: run writes (a stage returns them per row, :class:`RowValues`)
AFTER: frozenset[str] = frozenset({TOKENS_AFTER, TOTAL_TOKENS_AFTER, SUPERVISED_TOKENS_AFTER})

#: Lower edges of the token-length buckets: bucket i holds ``TOKEN_EDGES[i] <= n <
#: TOKEN_EDGES[i + 1]``, the last one every longer row.
TOKEN_EDGES: tuple[int, ...] = (0, *(2 ** k for k in range(5, 18)))


# -- typed values -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Histogram:
    """Rows per bucket, buckets sorted: ``counts[i]`` rows with ``edges[i] <= n <
    edges[i + 1]`` (the last bucket open). ``bounded[i]`` of them were placed by a sound
    upper bound of their length, not measured: their true length is at most the bucket's."""

    edges: tuple[int, ...]
    counts: tuple[int, ...]
    bounded: tuple[int, ...]

    @property
    def rows(self) -> int:
        return sum(self.counts)

    @property
    def bounded_rows(self) -> int:
        return sum(self.bounded)

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, Any] | None,
                     edges: tuple[int, ...] = TOKEN_EDGES) -> Histogram:
        m = metrics or {}
        index = {str(e): i for i, e in enumerate(edges)}

        def dense(part: Mapping[str, Any] | None) -> tuple[int, ...]:
            out = [0] * len(edges)
            for k, v in (part or {}).items():
                out[index[str(k)]] += int(v)
            return tuple(out)

        return cls(tuple(edges), dense(m.get("counts")), dense(m.get("bounded")))

    def to_json(self) -> dict[str, Any]:
        return {"edges": list(self.edges), "counts": list(self.counts),
                "bounded": list(self.bounded)}


@dataclass(frozen=True)
class Tally:
    """Rows (or occurrences) per category, e.g. per label."""

    counts: Mapping[str, int]

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, Any] | None) -> Tally:
        return cls({str(k): int(v) for k, v in sorted((metrics or {}).items())})

    def to_json(self) -> dict[str, int]:
        return dict(self.counts)


@dataclass(frozen=True)
class Total:
    """A sum over rows. When ``bounded_rows`` > 0, that many rows entered with a sound upper
    bound instead of their measured value, so ``value`` is an upper bound."""

    value: int | float
    bounded_rows: int = 0

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, Any] | None) -> Total:
        m = metrics or {}
        return cls(m.get("value", 0), int(m.get("bounded_rows", 0)))

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "bounded_rows": self.bounded_rows}


Value = Histogram | Tally | Total


@dataclass
class Summary:
    """What one stage published over the whole run, by name."""

    values: dict[str, Value] = field(default_factory=dict)

    def distributions(self) -> dict[str, Histogram | Tally]:
        return {k: v for k, v in self.values.items() if not isinstance(v, Total)}

    def totals(self) -> dict[str, Total]:
        return {k: v for k, v in self.values.items() if isinstance(v, Total)}


@dataclass(frozen=True)
class RowValues:
    """One published figure per row of a batch, to be summed over the rows that are kept.

    ``values[i]`` is row ``i``'s value (tokens, supervised tokens); ``bounded[i]``: placed by
    a sound upper bound, not measured; ``counted[i]`` False: the row has no value (no
    sequence could be built) and is left out of the figure. ``None`` means none bounded,
    every row counted.

        >>> v = RowValues(np.array([3, 40, 7]), bounded=np.array([False, True, False]))
        >>> v.metrics(TOTAL_TOKENS_AFTER), v.take(np.array([0, 2])).metrics(TOTAL_TOKENS_AFTER)
        ({'value': 50, 'bounded_rows': 1}, {'value': 10, 'bounded_rows': 0})
        >>> v.metrics(TOKENS_AFTER)
        {'counts': {'0': 2, '32': 1}, 'bounded': {'32': 1}}
    """

    values: np.ndarray
    bounded: np.ndarray | None = None
    counted: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.values)

    def _mask(self, part: np.ndarray | None, default: bool) -> np.ndarray:
        return np.full(len(self), default) if part is None else np.asarray(part, dtype=bool)

    def take(self, rows: np.ndarray) -> RowValues:
        """The values of ``rows`` (positions, or a boolean mask), in that order."""
        return RowValues(np.asarray(self.values)[rows],
                         None if self.bounded is None else np.asarray(self.bounded)[rows],
                         None if self.counted is None else np.asarray(self.counted)[rows])

    def put(self, rows: np.ndarray, new: RowValues) -> RowValues:
        """A copy with the values at positions ``rows`` replaced by ``new``'s."""
        values = np.array(self.values, dtype=np.int64)  # copies: this one stays as it is
        bounded = np.array(self._mask(self.bounded, False))
        counted = np.array(self._mask(self.counted, True))
        values[rows] = new.values
        bounded[rows] = new._mask(new.bounded, False)
        counted[rows] = new._mask(new.counted, True)
        return RowValues(values, bounded, counted)

    @staticmethod
    def concat(parts: list[RowValues]) -> RowValues:
        """The values of consecutive batches, as one batch's.

            >>> v = RowValues.concat([RowValues(np.array([3])),
            ...                       RowValues(np.array([40]), bounded=np.array([True]))])
            >>> v.values.tolist(), v.bounded.tolist(), v.counted
            ([3, 40], [False, True], None)
        """
        def joined(masks: list[np.ndarray | None], default: bool) -> np.ndarray | None:
            if all(m is None for m in masks):
                return None
            return np.concatenate([p._mask(m, default) for p, m in zip(parts, masks,
                                                                       strict=True)])

        return RowValues(np.concatenate([np.asarray(p.values) for p in parts]),
                         joined([p.bounded for p in parts], False),
                         joined([p.counted for p in parts], True))

    def metrics(self, name: str) -> dict[str, Any]:
        """The summable metrics of published ``name`` over the counted rows."""
        c = self._mask(self.counted, True)
        v, b = np.asarray(self.values)[c], self._mask(self.bounded, False)[c]
        if NAMES[name] is Kind.HISTOGRAM:
            return histogram_metrics(v, b)
        return total_metrics(int(v.sum()), int(b.sum()))


# -- per-batch metrics ------------------------------------------------------------------------
def histogram_metrics(values: Iterable[float] | np.ndarray,
                      bounded: Iterable[bool] | np.ndarray | None = None,
                      edges: tuple[int, ...] = TOKEN_EDGES) -> dict[str, dict[str, int]]:
    """One batch's histogram as summable metrics (``bounded``: placed by an upper bound)."""
    v = np.asarray(list(values) if not isinstance(values, np.ndarray) else values,
                   dtype=np.float64)
    b = (np.zeros(v.size, dtype=bool) if bounded is None
         else np.asarray(list(bounded) if not isinstance(bounded, np.ndarray) else bounded,
                         dtype=bool))
    idx = np.searchsorted(np.asarray(edges[1:], dtype=np.float64), v, side="right")

    def sparse(which: np.ndarray) -> dict[str, int]:
        c = np.bincount(which, minlength=len(edges))
        return {str(edges[i]): int(c[i]) for i in np.flatnonzero(c)}

    return {"counts": sparse(idx), "bounded": sparse(idx[b])}


def total_metrics(value: int | float, bounded_rows: int = 0) -> dict[str, int | float]:
    """One batch's total as summable metrics."""
    return {"value": value, "bounded_rows": int(bounded_rows)}


def summary_of(names: Iterable[str], metrics: Mapping[str, Any]) -> Summary:
    """The typed values of ``names`` from a stage's metrics summed over every batch (absent
    ones, from a stage that saw no rows, are empty)."""
    out = Summary()
    for name in names:
        kind = NAMES[name]
        m = metrics.get(name)
        if kind is Kind.HISTOGRAM:
            out.values[name] = Histogram.from_metrics(m)
        elif kind is Kind.TALLY:
            out.values[name] = Tally.from_metrics(m)
        else:
            out.values[name] = Total.from_metrics(m)
    return out
