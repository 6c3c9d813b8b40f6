"""report.json against the shipped JSON Schema: valid reports pass, broken ones are refused."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest

from cleanpipe.report import (
    ReportSchemaError,
    example_report,
    load_report,
    to_json,
    write_reports,
)
from cleanpipe.report.schema import SCHEMA_VERSION, errors, load_schema, validate


def test_shipped_schema_is_a_valid_json_schema() -> None:
    schema = load_schema()
    jsonschema.validators.validator_for(schema).check_schema(schema)
    assert schema["properties"]["schema_version"]["const"] == SCHEMA_VERSION


def _properties(node, path=""):
    """Every named property in the schema, with its path."""
    if isinstance(node, dict):
        for name, sub in node.get("properties", {}).items():
            yield f"{path}/{name}", sub
            yield from _properties(sub, f"{path}/{name}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                yield from _properties(node[key], f"{path}/{key}")
        for name, sub in node.get("$defs", {}).items():
            yield from _properties(sub, f"{path}/$defs/{name}")


def test_every_field_is_documented() -> None:
    schema = load_schema()
    defs = schema["$defs"]
    undocumented = []
    for path, sub in _properties(schema):
        ref = sub.get("$ref", "")
        target = defs.get(ref.rsplit("/", 1)[-1], {}) if ref else {}
        if "description" not in sub and "description" not in target:
            undocumented.append(path)
    # codes' inner counters are described by their parent ("Per check code: ...").
    undocumented = [p for p in undocumented if "/codes/additionalProperties/" not in p]
    assert undocumented == []


def test_example_report_validates() -> None:
    validate(example_report())


def test_report_without_verdict_is_valid() -> None:
    r = example_report()
    del r["verdict"]
    assert errors(r) == []


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (lambda r: r.pop("totals"), "(root): 'totals'"),
        (lambda r: r["reasons"][0].update(action="delete"), "reasons/0/action"),
        (lambda r: r["pipeline"].update(config_hash="md5:abc"), "pipeline/config_hash"),
        (lambda r: r["totals"].update(read=-1), "totals/read"),
        (lambda r: r.update(extra_key=1), "(root)"),
        (lambda r: r["stages"][0].update(rows_in="1000"), "stages/0/rows_in"),
        (lambda r: r["distributions"]["chars_before"].pop("edges"),
         "distributions/chars_before"),
        (lambda r: r["verdict"].update(exit_code=7), "verdict/exit_code"),
        (lambda r: r["stages"][1]["metrics"]["codepoints"].update({"U+200B": "many"}),
         "stages/1/metrics"),
        (lambda r: r.update(schema_version="1"), "schema_version"),
    ],
)
def test_broken_reports_are_refused(mutate, where: str) -> None:
    r = example_report()
    mutate(r)
    problems = errors(r)
    assert problems, "a broken report validated"
    assert any(p.startswith(where) for p in problems), problems
    with pytest.raises(ReportSchemaError):
        validate(r)


def test_write_reports_refuses_an_invalid_report(tmp_path) -> None:
    r = example_report()
    r["totals"]["kept"] = None
    with pytest.raises(ReportSchemaError, match="totals/kept"):
        write_reports(r, tmp_path)
    assert not (tmp_path / "report.json").exists()


def test_non_finite_numbers_are_refused() -> None:
    r = example_report()
    r["stages"][3]["metrics"]["mean_tokens"] = float("nan")
    with pytest.raises(ReportSchemaError, match="non-finite"):
        to_json(r)


def test_numpy_values_become_plain_json(tmp_path) -> None:
    np = pytest.importorskip("numpy")
    r = example_report()
    r["totals"]["read"] = np.int64(1000)
    r["distributions"]["chars_after"]["counts"] = np.array(
        r["distributions"]["chars_after"]["counts"], dtype=np.int64)
    paths = write_reports(r, tmp_path)
    back = json.loads(paths["json"].read_text("utf-8"))
    assert back["totals"]["read"] == 1000
    assert back["distributions"]["chars_after"]["counts"] == r["distributions"]["chars_after"][
        "counts"].tolist()


def test_round_trip_keeps_every_value_and_chinese_unescaped(tmp_path) -> None:
    r = example_report()
    paths = write_reports(r, tmp_path)
    text = paths["json"].read_text("utf-8")
    assert "患者主诉头痛" in text  # ensure_ascii=False: readable in an editor or a diff
    assert load_report(tmp_path) == json.loads(json.dumps(r))


def test_load_report_rejects_other_schema_versions(tmp_path) -> None:
    r = copy.deepcopy(example_report())
    r["schema_version"] = "99"
    (tmp_path / "report.json").write_text(json.dumps(r), "utf-8")
    with pytest.raises(ReportSchemaError, match="schema_version"):
        load_report(tmp_path / "report.json")
