"""The pre-training CI gate: thresholds on a run's report, a verdict, and the exit codes.

A pipeline's ``gate:`` section is a :class:`GateConfig`. :func:`evaluate` checks a report
against it and returns the verdict the engine stores in ``report["verdict"]``; every rule
evaluated becomes one entry there (and one JUnit test case). Reasons are named ``stage/code``
(e.g. ``unicode/replacement_char``) or just ``code`` to mean that code in any stage.

Exit codes (:class:`cleanpipe.errors.ExitCode`), the same for every ``cleanpipe`` command:

* 0: the gate passed;
* 1: the gate failed (data problem: do not train on it);
* 2: usage or configuration error (bad flags, invalid pipeline or gate);
* 3: unreadable input (missing file, undecodable data, corrupt report).

Example::

    >>> gate = GateConfig(max_dropped_fraction=0.05, never=["replacement_char"])
    >>> report = {"totals": {"read": 100, "kept": 90, "quarantined": 10, "failed": 0},
    ...           "reasons": [{"stage": "dedup", "code": "exact_duplicate", "action": "drop",
    ...                        "events": 10, "rows": 10}]}
    >>> verdict = evaluate(report, gate)
    >>> verdict["passed"], verdict["exit_code"]
    (False, 1)
    >>> [r["name"] for r in verdict["rules"] if not r["passed"]]
    ['max_dropped_fraction']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cleanpipe.errors import CleanpipeError, ExitCode

__all__ = ["GateConfig", "GateConfigError", "evaluate", "load_gate"]


class GateConfigError(CleanpipeError, ValueError):
    """The ``gate:`` section is invalid (exit code 2)."""


class GateConfig(BaseModel):
    """The ``gate:`` section of a pipeline YAML. Every threshold is optional.

    Example YAML::

        gate:
          max_dropped_fraction: 0.05        # at most 5% of rows quarantined overall
          max_reason_fraction: 0.02         # no single drop reason above 2% of rows read
          max_reason_fractions: {dedup/exact_duplicate: 0.03}
          max_reason_count: {labels/unknown_label: 0, too_long: 100}
          never: [unicode/replacement_char, token_id_out_of_range]
          min_rows_out: 10000

    Findings with action ``fail`` always fail the gate (rule ``no_fail_findings``), and so
    does an output with no rows (``min_rows_out`` defaults to 1).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    max_dropped_fraction: float | None = Field(default=None, ge=0.0, le=1.0)
    """Most rows, as a fraction of rows read, that may be quarantined overall."""
    max_reason_fraction: float | None = Field(default=None, ge=0.0, le=1.0)
    """Most rows, as a fraction of rows read, that any single drop reason may quarantine."""
    max_reason_fractions: dict[str, float] = {}
    """Per-reason limit as a fraction of rows read (any action counts), ``{reason: f}``."""
    max_reason_count: dict[str, int] = {}
    """Most rows each named reason may hit (any action), ``{reason: count}``."""
    never: list[str] = []
    """Reasons that must not fire at all (any action)."""
    min_rows_out: int | None = Field(default=1, ge=0)
    """Fewest rows the cleaned output may have. Default 1: an empty input (a wrong glob, an
    empty shard, a failed export) or a run that quarantined every row fails the gate rather
    than pass as clean; set 0 (or null) to allow an empty output."""

    @field_validator("max_reason_fractions")
    @classmethod
    def _fractions(cls, v: dict[str, float]) -> dict[str, float]:
        bad = {k: x for k, x in v.items() if not 0.0 <= x <= 1.0}
        if bad:
            raise ValueError(f"fractions must be within [0, 1]: {bad}")
        return v

    @field_validator("max_reason_count")
    @classmethod
    def _counts(cls, v: dict[str, int]) -> dict[str, int]:
        bad = {k: x for k, x in v.items() if x < 0}
        if bad:
            raise ValueError(f"counts must be >= 0: {bad}")
        return v

    def reason_keys(self) -> set[str]:
        """Every reason this gate names (for checking them against the pipeline's codes)."""
        return set(self.max_reason_fractions) | set(self.max_reason_count) | set(self.never)

    def unknown_reasons(self, codes: Mapping[str, Iterable[str]]) -> list[str]:
        """Reasons named here that no stage declares; ``codes`` is ``{stage: [code, ...]}``.

        A typo in ``never:`` would otherwise make a rule that can never fire, so the pipeline
        loader reports these as a configuration error.
        """
        known = {c for cs in codes.values() for c in cs}
        known |= {f"{s}/{c}" for s, cs in codes.items() for c in cs}
        return sorted(k for k in self.reason_keys() if k not in known)


def load_gate(data: Mapping[str, Any] | None) -> GateConfig:
    """Validate a ``gate:`` mapping (``None`` means no thresholds), raising GateConfigError."""
    try:
        return GateConfig.model_validate(dict(data or {}))
    except ValidationError as e:
        raise GateConfigError(f"invalid gate section: {e}") from e


def _matches(key: str, reason: Mapping[str, Any]) -> bool:
    if "/" in key:
        return key == f"{reason['stage']}/{reason['code']}"
    return key == reason["code"]


def _rows_of(key: str, reasons: list[Mapping[str, Any]]) -> int:
    # A bare code may exist in several stages; its rows add up (a row can be counted once per
    # stage, which errs on the strict side for a threshold).
    return int(sum(r["rows"] for r in reasons if _matches(key, r)))


def _rule(name: str, passed: bool, message: str, value: float | None = None,
          limit: float | None = None) -> dict[str, Any]:
    return {"name": name, "passed": bool(passed), "message": message, "value": value,
            "limit": limit}


def _pct(x: float) -> str:
    return f"{100 * x:.3g}%"


def evaluate(report: Mapping[str, Any], gate: GateConfig | Mapping[str, Any] | None) -> dict:
    """Check ``report`` against ``gate``; returns ``{"passed", "exit_code", "rules"}``."""
    if not isinstance(gate, GateConfig):
        gate = load_gate(gate)
    totals = report.get("totals", {})
    read = int(totals.get("read", 0))
    kept = int(totals.get("kept", 0))
    reasons = [r for r in report.get("reasons", []) if r.get("rows", 0) or r.get("events", 0)]
    rules: list[dict[str, Any]] = []

    def frac(rows: int) -> float:
        return rows / read if read else 0.0

    fail_reasons = [r for r in reasons if r["action"] == "fail"]
    failed_rows = max(int(totals.get("failed", 0)), _max_rows(fail_reasons))
    names = ", ".join(f"{r['stage']}/{r['code']}" for r in fail_reasons) or "none"
    rules.append(_rule(
        "no_fail_findings", failed_rows == 0,
        f"{failed_rows:,} row(s) hit a check whose action is fail ({names})"
        if failed_rows else "no check with action fail fired",
        failed_rows, 0,
    ))

    if gate.max_dropped_fraction is not None:
        q = int(totals.get("quarantined", 0))
        f = frac(q)
        rules.append(_rule(
            "max_dropped_fraction", f <= gate.max_dropped_fraction,
            f"{q:,} of {read:,} rows quarantined ({_pct(f)}; "
            f"limit {_pct(gate.max_dropped_fraction)})",
            f, gate.max_dropped_fraction,
        ))

    if gate.max_reason_fraction is not None:
        drops = [r for r in reasons if r["action"] == "drop"]
        for r in sorted(drops, key=lambda r: (r["stage"], r["code"])):
            f = frac(int(r["rows"]))
            rules.append(_rule(
                f"max_reason_fraction[{r['stage']}/{r['code']}]",
                f <= gate.max_reason_fraction,
                f"{r['rows']:,} of {read:,} rows dropped by {r['stage']}/{r['code']} ({_pct(f)}; "
                f"limit {_pct(gate.max_reason_fraction)})",
                f, gate.max_reason_fraction,
            ))
        if not drops:
            rules.append(_rule("max_reason_fraction", True, "no drop reason fired", 0.0,
                               gate.max_reason_fraction))

    for key, limit in sorted(gate.max_reason_fractions.items()):
        rows = _rows_of(key, reasons)
        f = frac(rows)
        rules.append(_rule(
            f"max_reason_fractions[{key}]", f <= limit,
            f"{key} hit {rows:,} of {read:,} rows ({_pct(f)}; limit {_pct(limit)})", f, limit,
        ))

    for key, limit in sorted(gate.max_reason_count.items()):
        rows = _rows_of(key, reasons)
        rules.append(_rule(
            f"max_reason_count[{key}]", rows <= limit,
            f"{key} hit {rows:,} row(s) (limit {limit:,})", rows, limit,
        ))

    for key in sorted(set(gate.never)):
        rows = _rows_of(key, reasons)
        rules.append(_rule(
            f"never[{key}]", rows == 0,
            f"{key} fired on {rows:,} row(s); it must never fire" if rows
            else f"{key} did not fire", rows, 0,
        ))

    if gate.min_rows_out is not None:
        rules.append(_rule("min_rows_out", kept >= gate.min_rows_out,
                           _rows_out_message(read, kept, gate.min_rows_out), kept,
                           gate.min_rows_out))

    passed = all(r["passed"] for r in rules)
    return {"passed": passed,
            "exit_code": int(ExitCode.PASSED if passed else ExitCode.GATE_FAILED),
            "rules": rules}


def _rows_out_message(read: int, kept: int, minimum: int) -> str:
    """The ``min_rows_out`` sentence; an empty input or output says so in words.

        >>> _rows_out_message(0, 0, 1)
        'the input has no rows: 0 rows out (minimum 1); set gate.min_rows_out: 0 to allow it'
        >>> _rows_out_message(5, 0, 1)
        'every row was quarantined: 0 rows out (minimum 1)'
    """
    text = f"{kept:,} rows out (minimum {minimum:,})"
    if kept >= minimum:
        return text
    if read == 0:
        return f"the input has no rows: {text}; set gate.min_rows_out: 0 to allow it"
    if kept == 0:
        return f"every row was quarantined: {text}"
    return text


def _max_rows(reasons: list[Mapping[str, Any]]) -> int:
    # Distinct rows across reasons are unknown here; the largest is a lower bound.
    return int(max((r["rows"] for r in reasons), default=0))
