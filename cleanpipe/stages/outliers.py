"""``outliers``: records far from the corpus on length and character mix (median/MAD).

Each feature is scored by its robust z-score ``|x - median| / (1.4826 · MAD)`` over the
whole corpus (length on a log scale, so a long tail does not hide the short extremes).
Features: ``chars`` (characters over the text fields), ``tokens`` (when a tokenizer is
given), and the ratios of letters, digits, whitespace and other symbols. Flag by default:
an outlier is a record to look at, not necessarily a bad one.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, PrivateAttr, field_validator

from cleanpipe.contract.stage import (
    Action,
    BatchContext,
    BatchResult,
    Findings,
    GlobalStage,
    StageError,
)

_CLASSES = {"letter_ratio": r"\p{L}", "digit_ratio": r"\p{Nd}", "space_ratio": r"\s",
            "symbol_ratio": r"[\p{P}\p{S}]"}
#: the features :class:`Outliers` can score
Feature = Literal["chars", "tokens", "letter_ratio", "digit_ratio", "space_ratio",
                  "symbol_ratio"]
_MAD_SCALE = 1.4826  # makes the MAD estimate the standard deviation of a normal
# Smallest scale per feature. Where nearly every record has the same value (no digits at all,
# say), the MAD is zero and any non-zero value would score as extreme; a floor in the
# feature's own units means a record must differ by a real amount (with threshold 6 and 0.05,
# 30% of its characters) before it is flagged.
_MIN_SCALE = {"chars": 0.1, "tokens": 0.1, "letter_ratio": 0.05, "digit_ratio": 0.05,
              "space_ratio": 0.05, "symbol_ratio": 0.05}


class Outliers(GlobalStage):
    """Flag records whose robust z-score on any feature exceeds ``threshold``.

        >>> s = Outliers(fields=["text"], threshold=3.5)
        >>> rows = ["a normal sentence here"] * 20 + ["x" * 5000]
        >>> len(s({"text": rows})["text"])
        21
        >>> s.report_section()["flagged"]
        1
    """

    name = "outliers"
    codes = {"outlier": Action.FLAG}
    forbidden_actions = {"outlier": frozenset({Action.FIX})}

    fields: list[str] | None = None
    """Text fields measured (default: the pipeline's text fields)."""
    features: list[Feature] = ["chars", "letter_ratio", "digit_ratio", "space_ratio",
                           "symbol_ratio"]
    """Features to score; add ``tokens`` with a ``tokenizer``."""
    threshold: float = Field(6.0, gt=0.0)
    """Robust z-score above which a record is flagged (per feature)."""
    thresholds: dict[Feature, float] = {}
    """Per-feature thresholds overriding ``threshold``."""
    tokenizer: str | None = None
    """tokenizer.json or model directory, for the ``tokens`` feature."""
    min_scale: dict[str, float] = {}
    """Per-feature floor of the scale, overriding the defaults (0.05 for the ratios, 0.1 for
    the log lengths), so a value that is merely non-zero where most are zero is no outlier."""

    @field_validator("thresholds")
    @classmethod
    def _positive(cls, v: dict[str, float]) -> dict[str, float]:
        bad = {k: x for k, x in v.items() if not x > 0}
        if bad:
            raise ValueError(f"thresholds must be greater than 0: {bad}")
        return v

    _values: list[np.ndarray] = PrivateAttr(default_factory=list)
    _center: np.ndarray | None = PrivateAttr(default=None)
    _scale: np.ndarray | None = PrivateAttr(default=None)
    _flagged: int = PrivateAttr(default=0)
    _tok: Any = PrivateAttr(default=None)

    def _tokenizer(self) -> Any:
        """The tokenizer of the ``tokens`` feature, loaded once per process where batches
        are measured (not in setup(): the process that only observes and finalizes never
        needs it)."""
        if self._tok is None:
            if not self.tokenizer:
                raise StageError("outliers: the tokens feature needs a tokenizer")
            from cleanpipe.contract.sequence_stage import load_stage_tokenizer

            self._tok = load_stage_tokenizer(self.name, self.tokenizer)
        return self._tok

    def __getstate__(self) -> dict[str, Any]:
        # Ship parameters and state, not the tokenizer: a process loads it on first use
        # (_tokenizer), where it measures a batch.
        state = super().__getstate__()
        state["__pydantic_private__"] = {**state["__pydantic_private__"], "_tok": None}
        return state

    def _features(self, batch: pa.RecordBatch, ctx: BatchContext) -> np.ndarray:
        n = batch.num_rows
        cols = {f: np.zeros(n) for f in self.features}
        total = np.zeros(n)
        texts = []
        for flat in ctx.all_texts(self.fields):
            v = pc.fill_null(flat.values, "")
            texts.append((flat, v))
            total += np.bincount(flat.rows, weights=pc.utf8_length(v).to_numpy(
                zero_copy_only=False).astype(float), minlength=n)
        if "chars" in cols:
            cols["chars"] = np.log1p(total)
        for feat, pattern in _CLASSES.items():
            if feat in cols:
                cnt = np.zeros(n)
                for flat, v in texts:
                    cnt += np.bincount(flat.rows, weights=pc.count_substring_regex(
                        v, pattern).to_numpy(zero_copy_only=False).astype(float), minlength=n)
                cols[feat] = cnt / np.maximum(total, 1)
        if "tokens" in cols:
            tok = self._tokenizer()  # once per process, not once per batch
            t = np.zeros(n)
            for flat, v in texts:
                t += np.bincount(flat.rows, weights=tok.count(v.to_pylist(), False),
                                 minlength=n)
            cols["tokens"] = np.log1p(t)
        return np.column_stack([cols[f] for f in self.features])

    def prepare(self, batch: pa.RecordBatch, ctx: BatchContext) -> Any:
        return self._features(batch, ctx)

    def observe_reads_batch(self) -> bool:
        return False  # observe keeps the prepared features (and seq, row ids) only

    def observe(self, prepared: Any, seq: np.ndarray, batch: pa.RecordBatch,
                ctx: BatchContext) -> None:
        self._values.append(prepared)

    def finalize(self) -> None:
        allv = np.concatenate(self._values) if self._values else np.zeros((0, len(self.features)))
        self._center = np.median(allv, axis=0) if len(allv) else np.zeros(len(self.features))
        mad = np.median(np.abs(allv - self._center), axis=0) if len(allv) else \
            np.zeros(len(self.features))
        # A zero MAD (most records identical on a feature) would flag every deviation;
        # fall back to the mean absolute deviation, never below the feature's floor.
        mean_ad = np.mean(np.abs(allv - self._center), axis=0) * 1.2533 if len(allv) else mad
        floor = np.array([self.min_scale.get(f, _MIN_SCALE.get(f, 0.0)) for f in self.features])
        self._scale = np.maximum(np.where(mad > 0, _MAD_SCALE * mad, mean_ad), floor)
        self._values = []

    def decide(self, batch: pa.RecordBatch, seq: np.ndarray, ctx: BatchContext) -> BatchResult:
        assert self._center is not None and self._scale is not None
        x = self._features(batch, ctx)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.abs(x - self._center) / self._scale
        z = np.where(self._scale > 0, z, 0.0)
        th = np.array([self.thresholds.get(f, self.threshold) for f in self.features])
        hit = z > th
        rows = np.flatnonzero(hit.any(axis=1))
        found = Findings(self.name)
        details = []
        for i in rows:
            j = int(np.argmax(z[i] / th))
            details.append(f"{self.features[j]}: robust z {z[i, j]:.1f} > {th[j]:g}")
        found.add(rows, "outlier", self.action_of("outlier"), detail=details)
        self._flagged += int(rows.size)
        per = {f: int(hit[:, k].sum()) for k, f in enumerate(self.features)}
        return BatchResult(None, found, {"flagged": int(rows.size), "by_feature": per})

    def report_section(self) -> dict[str, Any]:
        out: dict[str, Any] = {"flagged": self._flagged}
        if self._center is not None and self._scale is not None:
            out["median"] = dict(zip(self.features, self._center.tolist(), strict=True))
            out["scale"] = dict(zip(self.features, self._scale.tolist(), strict=True))
        return out
