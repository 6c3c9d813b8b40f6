"""The report.json schema: loading the shipped JSON Schema and validating reports against it.

``cleanpipe/schemas/report.schema.json`` is the single source of truth for the report's shape;
this module only reads it (the schema version constant included), so the engine, the renderers
and external consumers can never disagree about what a report is.

    >>> SCHEMA_VERSION
    '2'
    >>> validate({"schema_version": "2"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    cleanpipe.report.schema.ReportSchemaError: report.json does not match the schema: ...
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import jsonschema

__all__ = ["SCHEMA_VERSION", "ReportSchemaError", "errors", "load_schema", "validate"]


class ReportSchemaError(ValueError):
    """A report dict does not match ``report.schema.json``."""


@cache
def load_schema() -> dict[str, Any]:
    """The shipped JSON Schema, parsed (cached)."""
    text = resources.files("cleanpipe").joinpath("schemas/report.schema.json").read_text("utf-8")
    return json.loads(text)


SCHEMA_VERSION: str = load_schema()["properties"]["schema_version"]["const"]


@cache
def _validator() -> jsonschema.protocols.Validator:
    # The shipped schema is checked against its meta-schema by the tests
    # (test_report_schema), not at the end of every run (~30 ms).
    schema = load_schema()
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def errors(report: dict[str, Any]) -> list[str]:
    """Every mismatch, as ``path: message`` lines (empty when the report is valid)."""
    out = []
    for err in sorted(_validator().iter_errors(report), key=lambda e: list(e.absolute_path)):
        path = "/".join(str(p) for p in err.absolute_path) or "(root)"
        out.append(f"{path}: {err.message}")
    return out


def validate(report: dict[str, Any]) -> None:
    """Raise :class:`ReportSchemaError` listing every mismatch when ``report`` is invalid."""
    problems = errors(report)
    if problems:
        shown = "; ".join(problems[:10])
        more = f" (+{len(problems) - 10} more)" if len(problems) > 10 else ""
        raise ReportSchemaError(f"report.json does not match the schema: {shown}{more}")
