"""The gate: every rule passing and failing, reason matching, config errors and exit codes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cleanpipe.errors import ExitCode
from cleanpipe.gate import GateConfig, GateConfigError, evaluate, load_gate
from cleanpipe.report import example_report
from cleanpipe.report.schema import validate


def _report(read=1000, kept=950, failed=0, reasons=()):
    return {"totals": {"read": read, "kept": kept, "quarantined": read - kept, "changed": 0,
                       "flagged": 0, "failed": failed},
            "reasons": [dict(zip(("stage", "code", "action", "events", "rows"), r, strict=True))
                        for r in reasons]}


DUPES = ("dedup", "exact_duplicate", "drop", 30, 30)
LONG = ("length", "too_long", "drop", 20, 20)
FFFD = ("unicode", "replacement_char", "flag", 3, 2)


def _rule(verdict, name):
    (rule,) = [r for r in verdict["rules"] if r["name"] == name]
    return rule


def test_no_thresholds_passes_with_exit_code_0() -> None:
    # without thresholds two rules still hold: no `fail` finding, and at least one row out
    v = evaluate(_report(reasons=[DUPES, LONG]), GateConfig())
    assert v == {"passed": True, "exit_code": ExitCode.PASSED,
                 "rules": [_rule(v, "no_fail_findings"), _rule(v, "min_rows_out")]}


@pytest.mark.parametrize("gate", [GateConfig(), None, {}])
def test_empty_input_fails_by_default(gate) -> None:
    v = evaluate(_report(read=0, kept=0), gate)
    assert (v["passed"], v["exit_code"]) == (False, ExitCode.GATE_FAILED)
    rule = _rule(v, "min_rows_out")
    assert not rule["passed"] and (rule["value"], rule["limit"]) == (0, 1)
    assert rule["message"].startswith("the input has no rows")


def test_every_row_quarantined_fails_by_default() -> None:
    v = evaluate(_report(read=5, kept=0), GateConfig())
    assert not v["passed"]
    assert _rule(v, "min_rows_out")["message"].startswith("every row was quarantined")


def test_empty_output_allowed_on_request() -> None:
    assert evaluate(_report(read=0, kept=0), GateConfig(min_rows_out=0))["passed"]
    assert evaluate(_report(read=0, kept=0), {"min_rows_out": None})["passed"]


def test_max_dropped_fraction_boundary() -> None:
    r = _report(kept=950, reasons=[DUPES, LONG])  # 50 of 1000 = 5%
    assert evaluate(r, GateConfig(max_dropped_fraction=0.05))["passed"]
    v = evaluate(r, GateConfig(max_dropped_fraction=0.049))
    assert (v["passed"], v["exit_code"]) == (False, 1)
    rule = _rule(v, "max_dropped_fraction")
    assert rule["value"] == pytest.approx(0.05) and rule["limit"] == 0.049
    assert "50 of 1,000" in rule["message"]


def test_max_reason_fraction_one_rule_per_drop_reason() -> None:
    v = evaluate(_report(reasons=[DUPES, LONG, FFFD]), GateConfig(max_reason_fraction=0.025))
    by_name = {r["name"]: r["passed"] for r in v["rules"]}
    assert by_name == {"no_fail_findings": True,
                       "max_reason_fraction[dedup/exact_duplicate]": False,
                       "max_reason_fraction[length/too_long]": True, "min_rows_out": True}
    assert not v["passed"]


def test_max_reason_fraction_without_drops_is_one_passing_rule() -> None:
    v = evaluate(_report(kept=1000, reasons=[FFFD]), GateConfig(max_reason_fraction=0.0))
    assert v["passed"] and _rule(v, "max_reason_fraction")["value"] == 0.0


def test_per_reason_fraction_and_count_match_stage_slash_code_or_bare_code() -> None:
    r = _report(reasons=[DUPES, LONG, ("other", "too_long", "flag", 5, 5)])
    gate = GateConfig(max_reason_count={"too_long": 24, "length/too_long": 20},
                      max_reason_fractions={"dedup/exact_duplicate": 0.02})
    v = evaluate(r, gate)
    assert _rule(v, "max_reason_count[too_long]")["value"] == 25  # both stages' rows
    assert not _rule(v, "max_reason_count[too_long]")["passed"]
    assert _rule(v, "max_reason_count[length/too_long]")["passed"]
    assert not _rule(v, "max_reason_fractions[dedup/exact_duplicate]")["passed"]


def test_never_rule_fires_on_any_action() -> None:
    v = evaluate(_report(reasons=[FFFD]), GateConfig(never=["replacement_char", "nan_field"]))
    assert not _rule(v, "never[replacement_char]")["passed"]
    assert _rule(v, "never[nan_field]")["passed"]
    assert v["exit_code"] == 1


def test_reasons_with_zero_rows_do_not_count() -> None:
    v = evaluate(_report(reasons=[("unicode", "replacement_char", "flag", 0, 0)]),
                 GateConfig(never=["replacement_char"]))
    assert v["passed"]


def test_min_rows_out() -> None:
    assert evaluate(_report(kept=950), GateConfig(min_rows_out=950))["passed"]
    v = evaluate(_report(kept=950), GateConfig(min_rows_out=951))
    assert _rule(v, "min_rows_out")["message"] == "950 rows out (minimum 951)"


def test_any_fail_finding_fails_the_gate_even_without_thresholds() -> None:
    r = _report(failed=4, reasons=[("labels", "label_out_of_range", "fail", 4, 4)])
    v = evaluate(r, GateConfig())
    assert (v["passed"], v["exit_code"]) == (False, ExitCode.GATE_FAILED)
    assert "labels/label_out_of_range" in _rule(v, "no_fail_findings")["message"]


def test_verdict_fits_the_report_schema() -> None:
    r = example_report()
    r["verdict"] = evaluate(r, GateConfig(max_dropped_fraction=0.01, max_reason_fraction=0.01,
                                          max_reason_fractions={"too_long": 0.5},
                                          max_reason_count={"mojibake": 1},
                                          never=["zero_width"], min_rows_out=10))
    validate(r)
    assert len(r["verdict"]["rules"]) == 1 + 1 + 3 + 1 + 1 + 1 + 1


@pytest.mark.parametrize("bad", [
    {"max_droped_fraction": 0.1},           # typo: extra keys are refused
    {"max_dropped_fraction": 1.5},
    {"max_reason_fractions": {"too_long": -0.1}},
    {"max_reason_count": {"too_long": -1}},
    {"min_rows_out": "many"},
])
def test_invalid_gate_config_is_a_usage_error(bad) -> None:
    with pytest.raises(GateConfigError) as err:
        load_gate(bad)
    assert err.value.exit_code == ExitCode.USAGE == 2


def test_load_gate_from_yaml() -> None:
    yaml = pytest.importorskip("yaml")
    gate = load_gate(yaml.safe_load("""
        max_dropped_fraction: 0.05
        never: [unicode/replacement_char]
        max_reason_count: {too_long: 0}
    """))
    assert gate.never == ["unicode/replacement_char"] and gate.max_reason_count == {"too_long": 0}
    assert load_gate(None) == GateConfig()


def test_unknown_reasons_catches_typos() -> None:
    gate = GateConfig(never=["unicode/replacement_char", "replacment_char"],
                      max_reason_count={"dedup/exact_duplicate": 3})
    codes = {"unicode": ["replacement_char", "mojibake"], "dedup": ["exact_duplicate"]}
    assert gate.unknown_reasons(codes) == ["replacment_char"]


def test_exit_codes_are_the_documented_ones() -> None:
    doc = (Path(__file__).parents[1] / "docs" / "ci_gate.md").read_text(encoding="utf-8")
    table = doc.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    documented = [int(m) for m in re.findall(r"^\| (\d+) \|", table, flags=re.M)]
    assert [int(c) for c in ExitCode] == documented == [0, 1, 2, 3, 70, 130, 143]
