"""junit.xml: one test case per gate rule, so CI systems list (and diff) them.

    >>> xml = render_junit({"pipeline": {"name": "sft"}, "verdict": {"passed": False,
    ...     "exit_code": 1, "rules": [{"name": "min_rows_out", "passed": False,
    ...     "message": "5 rows out (minimum 10)", "value": 5, "limit": 10}]}})
    >>> '<failure message="5 rows out (minimum 10)"' in xml
    True
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

__all__ = ["render_junit"]

# XML 1.0 cannot carry most C0 controls, surrogates or U+FFFE/FFFF, even escaped.
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _clean(text: Any) -> str:
    return _XML_INVALID.sub(lambda m: f"\\x{ord(m.group()):02x}", "" if text is None else str(text))


def render_junit(report: dict[str, Any]) -> str:
    """JUnit XML for ``report``'s verdict (an empty suite when no gate ran); a report with an
    ``error`` (see :mod:`cleanpipe.report.error`) adds one erroring test case."""
    name = _clean(report.get("pipeline", {}).get("name", "pipeline"))
    verdict = report.get("verdict") or {"rules": []}
    rules = verdict["rules"]
    failures = sum(not r["passed"] for r in rules)
    error = report.get("error")
    tests, errors = str(len(rules) + bool(error)), str(int(bool(error)))
    seconds = f"{report.get('timing', {}).get('wall_seconds', 0.0):.3f}"
    suites = ET.Element("testsuites", name="cleanpipe", tests=tests,
                        failures=str(failures), errors=errors, time=seconds)
    suite = ET.SubElement(suites, "testsuite", name=f"cleanpipe gate: {name}",
                          tests=tests, failures=str(failures), errors=errors,
                          skipped="0", time=seconds)
    if error:
        # a run that stopped on an error is one erroring case, so CI shows why
        case = ET.SubElement(suite, "testcase", classname=f"cleanpipe.gate.{name}",
                             name=_clean(f"cleanpipe {report.get('command', 'run')}"), time="0")
        err = ET.SubElement(case, "error", message=_clean(error["message"]),
                            type=_clean(error["kind"]))
        err.text = _clean(f"exit code {error['exit_code']}: {error['message']}")
    if "started" in report.get("timing", {}):
        suite.set("timestamp", _clean(report["timing"]["started"]))
    for r in rules:
        case = ET.SubElement(suite, "testcase", classname=f"cleanpipe.gate.{name}",
                             name=_clean(r["name"]), time="0")
        if not r["passed"]:
            fail = ET.SubElement(case, "failure", message=_clean(r["message"]),
                                 type="GateRuleFailed")
            fail.text = _clean(f"{r['message']}\nvalue: {r.get('value')}\nlimit: {r.get('limit')}")
        else:
            out = ET.SubElement(case, "system-out")
            out.text = _clean(r["message"])
    ET.indent(suites)
    body = ET.tostring(suites, encoding="unicode")
    return f'<?xml version="1.0" encoding="UTF-8"?>\n{body}\n'
