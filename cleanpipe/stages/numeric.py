"""``numeric``: NaN, ±Inf, nulls and out-of-range values in numeric columns (scores, rewards,
weights). One NaN reward or loss weight turns the whole loss NaN.

A text column is checked value by value: a value written as a number (``"0.5"``, ``"1e-3"``,
``"nan"``) is checked as that number and kept as it is (the stage never rewrites a value, so
nothing changes type); any other text is ``not_numeric`` in its own row. The verdict on a row
therefore depends on that row alone, never on the batch it was read with.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import field_validator

from cleanpipe.columns import is_utf8, typed_nulls
from cleanpipe.contract.stage import Action, BatchContext, BatchResult, BatchStage, Findings

#: what Arrow's string-to-float cast reads: decimal and exponent forms, nan, inf, infinity
_NUMBER = r"(?i)^[+-]?(?:\d+\.?\d*(?:e[+-]?\d+)?|\.\d+(?:e[+-]?\d+)?|nan|inf|infinity)$"


class NumericCheck(BatchStage):
    """Check declared numeric columns.

        >>> NumericCheck(fields=["score"], ranges={"score": (0, 1)})(
        ...     {"score": [0.5, float("nan"), 3.0, None]})
        {'score': [0.5, None]}
        >>> NumericCheck(fields=["score"])({"score": ["0.5", "high", "nan", None]})
        {'score': ['0.5', None]}
    """

    name = "numeric"
    codes = {"nan": Action.DROP, "inf": Action.DROP, "null": Action.FLAG,
             "out_of_range": Action.DROP, "not_numeric": Action.DROP}
    forbidden_actions = {c: frozenset({Action.FIX}) for c in
                         ("nan", "inf", "null", "out_of_range", "not_numeric")}

    fields: list[str]
    """Numeric columns to check."""
    ranges: dict[str, tuple[float | None, float | None]] = {}
    """Inclusive ``[min, max]`` per column (None: unbounded on that side)."""

    @field_validator("ranges")
    @classmethod
    def _min_not_above_max(cls, v: dict[str, tuple[float | None, float | None]]
                           ) -> dict[str, tuple[float | None, float | None]]:
        for col, (lo, hi) in v.items():
            if lo is not None and hi is not None and lo > hi:
                raise ValueError(f"range of {col!r}: min {lo:g} is above max {hi:g}")
        return v

    def process(self, batch: pa.RecordBatch, ctx: BatchContext) -> BatchResult:
        found = Findings(self.name)
        metrics: dict[str, dict[str, int]] = {}
        for f in self.fields:
            idx = batch.schema.get_field_index(f)
            if idx < 0:
                found.add(np.arange(batch.num_rows), "not_numeric", self.action_of("not_numeric"),
                          field=f, detail=f"column {f!r} is missing")
                continue
            col = typed_nulls(batch.column(idx), pa.float64())
            text = np.zeros(batch.num_rows, dtype=bool)
            if is_utf8(col.type):
                is_num = pc.fill_null(pc.match_substring_regex(col, _NUMBER), False)
                text = pc.and_(pc.is_valid(col), pc.invert(is_num)).to_numpy(
                    zero_copy_only=False)
                found.add(text, "not_numeric", self.action_of("not_numeric"), field=f,
                          detail=[f"{f} holds {v[:80]!r}, not a number"
                                  for v in col.filter(pa.array(text)).to_pylist()])
                col = pc.cast(pc.if_else(is_num, col, pa.scalar(None, col.type)), pa.float64())
            if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)
                    or pa.types.is_boolean(col.type)):
                found.add(np.arange(batch.num_rows), "not_numeric",
                          self.action_of("not_numeric"), field=f, detail=f"{f} is {col.type}")
                continue
            vals = pc.cast(col, pa.float64()).to_numpy(zero_copy_only=False)
            absent = np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
            null = absent & ~text  # text that is not a number is not_numeric, not null
            nan = np.isnan(vals) & ~absent
            inf = np.isinf(vals)
            lo, hi = self.ranges.get(f, (None, None))
            finite = np.isfinite(vals) & ~absent
            out = np.zeros(len(vals), dtype=bool)
            if lo is not None:
                out |= finite & (vals < lo)
            if hi is not None:
                out |= finite & (vals > hi)
            for code, mask in (("null", null), ("nan", nan), ("inf", inf),
                               ("out_of_range", out)):
                detail = None
                if code == "out_of_range":
                    detail = [f"{v:g} outside [{lo}, {hi}]" for v in vals[mask]]
                found.add(mask, code, self.action_of(code), field=f, detail=detail)
            metrics[f] = {"null": int(null.sum()), "nan": int(nan.sum()),
                          "inf": int(inf.sum()), "out_of_range": int(out.sum())}
        return BatchResult(None, found, metrics)
