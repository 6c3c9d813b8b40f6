"""Repeated, interleaved measurements and how to summarise them honestly.

On a shared machine one run of a tool says little: load comes and goes, and a tool measured
while another engineer's job ran looks slow. So every tool runs ``reps`` times, *interleaved*
(A B C A B C ..., never A A A B B B), so that a burst of load hits every tool rather than one,
and each figure is the median with its min–max spread, never a best-of or a single sample.

    >>> interleaved(["a", "b", "c"], 2)
    [(0, 'a'), (0, 'b'), (0, 'c'), (1, 'a'), (1, 'b'), (1, 'c')]
    >>> s = Spread.of([3.0, 1.0, 2.0, 10.0])
    >>> s.median, s.low, s.high, s.n
    (2.5, 1.0, 10.0, 4)
    >>> s.fmt("{:.1f}")
    '2.5 (1.0–10.0)'
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


def interleaved(items: Sequence[T], reps: int) -> list[tuple[int, T]]:
    """``(repetition, item)`` in the order to run them: every item once per repetition.

    >>> [i for _, i in interleaved(["x", "y"], 3)]
    ['x', 'y', 'x', 'y', 'x', 'y']
    """
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    return [(r, item) for r in range(reps) for item in items]


@dataclass(frozen=True)
class Spread:
    """Median and min–max of repeated measurements of one thing.

    >>> Spread.of([5.0]).fmt()
    '5.00 (5.00–5.00)'
    """

    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        vals = sorted(float(v) for v in values)
        if not vals:
            raise ValueError("no measurements")
        return cls(statistics.median(vals), vals[0], vals[-1], len(vals))

    def fmt(self, spec: str = "{:.2f}") -> str:
        """``median (min–max)``."""
        return f"{spec.format(self.median)} ({spec.format(self.low)}–{spec.format(self.high)})"


def ratio_spread(slow: Spread, fast: Spread) -> tuple[float, float, float]:
    """``slow / fast`` as (median ratio, lowest, highest) over the two spreads.

    The bounds pair the extremes (slow's fastest run over fast's slowest, and the reverse),
    so the interval holds every ratio a pair of the measured runs could give.

    >>> ratio_spread(Spread.of([10, 12, 14]), Spread.of([1, 2, 4]))
    (6.0, 2.5, 14.0)
    """
    return slow.median / fast.median, slow.low / fast.high, slow.high / fast.low
