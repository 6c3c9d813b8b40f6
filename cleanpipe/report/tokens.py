"""The token figures of a report, for the renderers: a row per stage and figure, with its
value before (the rows reaching the stage) and after (the rows the run wrote to the cleaned
dataset, whatever later stages dropped: what the trainer trains on), under the
:data:`BEFORE_HEADING` and :data:`AFTER_HEADING` headings of the table's
:data:`COLUMNS`.

    >>> rows = token_figures({"stages": [{"name": "context_length", "totals": {
    ...     "total_tokens_after": {"value": 90, "bounded_rows": 0},
    ...     "total_tokens_before": {"value": 120, "bounded_rows": 2},
    ...     "share_over_window": {"value": 0.25, "bounded_rows": 0}}}]})
    >>> for r in rows:
    ...     print([r.stage, r.figure, total_text(r.before), total_text(r.after)])
    ['context_length', 'total_tokens', '≤ 120', '90']
    ['context_length', 'share_over_window', '25.00%', '']
    >>> any_bounded(rows)
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cleanpipe.contract.published import NAMES

__all__ = ["AFTER_HEADING", "BEFORE_HEADING", "BOUND_NOTE", "COLUMNS", "TokenFigure",
           "any_bounded", "token_figures", "total_text"]

#: the headings of the two value columns, saying which rows each counts
BEFORE_HEADING = "before: rows reaching the stage"
AFTER_HEADING = "after: rows written"
#: the renderers' table: one row per :class:`TokenFigure`
COLUMNS = ("stage", "figure", BEFORE_HEADING, AFTER_HEADING)

BOUND_NOTE = ("≤: an upper bound; rows proven to fit the window were not counted in full "
              "(set exact_counts: true on the stage to measure every row).")


@dataclass(frozen=True)
class TokenFigure:
    """One published total of one stage; ``after`` is None for a figure with no pair."""

    stage: str
    figure: str
    before: Mapping[str, Any] | None
    after: Mapping[str, Any] | None


def _order(name: str) -> tuple[int, str]:
    # the contract's order: tokens, supervised tokens, then rows
    return (list(NAMES).index(name) if name in NAMES else len(NAMES), name)


def token_figures(report: Mapping[str, Any]) -> list[TokenFigure]:
    """Every stage's published totals, ``*_before``/``*_after`` pairs on one row."""
    out = []
    for st in report.get("stages", []):
        totals = st.get("totals") or {}
        seen: list[str] = []
        for k in sorted(totals, key=_order):
            base = k.removesuffix("_before").removesuffix("_after")
            if base in seen:
                continue
            seen.append(base)
            if base in totals:
                out.append(TokenFigure(st["name"], base, totals[base], None))
            else:
                out.append(TokenFigure(st["name"], base, totals.get(f"{base}_before"),
                                       totals.get(f"{base}_after")))
    return out


def total_text(total: Mapping[str, Any] | None) -> str:
    """A total as text; ``≤`` marks an upper bound (rows that entered by a bound)."""
    if total is None:
        return ""
    v = total["value"]
    text = f"{v:.2%}" if isinstance(v, float) and v <= 1 else f"{v:,}"
    return f"≤ {text}" if total.get("bounded_rows") else text


def any_bounded(rows: list[TokenFigure]) -> bool:
    return any(t is not None and t.get("bounded_rows") for r in rows for t in (r.before, r.after))
