"""``cleanpipe diff A/report.json B/report.json``: what changed between two runs.

For reviewing a data change: totals, rows per reason (new, gone, up, down), per-stage drops,
the verdict, and whether the pipeline or the input changed at all. ``--fail-on-new`` exits 1
when B has a reason A did not (a CI step on a pull request that touches data).

    >>> dup = {"stage": "dedup", "code": "exact_duplicate", "action": "drop", "events": 1,
    ...        "rows": 1}
    >>> a = {"totals": {"read": 10, "kept": 9}, "reasons": [dup]}
    >>> b = {"totals": {"read": 12, "kept": 10}, "reasons": [
    ...     dup, {"stage": "unicode", "code": "mojibake", "action": "fix", "events": 3, "rows": 2}]}
    >>> d = diff_reports(a, b)
    >>> [(r["reason"], r["status"], r["delta"]) for r in d["reasons"]]
    [('unicode/mojibake', 'new', 2), ('dedup/exact_duplicate', 'same', 0)]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from cleanpipe.errors import ExitCode

__all__ = ["diff_reports", "register", "render_diff"]

TOTALS = ("read", "kept", "quarantined", "changed", "flagged", "failed")


def _reasons(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{r['stage']}/{r['code']}": r for r in report.get("reasons", [])
            if r.get("rows") or r.get("events")}


def _share(rows: int, read: int) -> float | None:
    return rows / read if read else None


def diff_reports(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The differences between report ``a`` (before) and ``b`` (after), as plain data."""
    ta, tb = a.get("totals", {}), b.get("totals", {})
    read_a, read_b = int(ta.get("read", 0)), int(tb.get("read", 0))
    totals = {k: {"a": int(ta.get(k, 0)), "b": int(tb.get(k, 0)),
                  "delta": int(tb.get(k, 0)) - int(ta.get(k, 0))} for k in TOTALS}
    ra, rb = _reasons(a), _reasons(b)
    reasons = []
    for key in sorted(set(ra) | set(rb)):
        rows_a = int(ra[key]["rows"]) if key in ra else 0
        rows_b = int(rb[key]["rows"]) if key in rb else 0
        status = ("new" if key not in ra else "gone" if key not in rb
                  else "up" if rows_b > rows_a else "down" if rows_b < rows_a else "same")
        action_a = ra.get(key, {}).get("action")
        action_b = rb.get(key, {}).get("action")
        reasons.append({
            "reason": key, "status": status, "a": rows_a, "b": rows_b, "delta": rows_b - rows_a,
            "share_a": _share(rows_a, read_a), "share_b": _share(rows_b, read_b),
            "action_a": action_a, "action_b": action_b,
            "action_changed": bool(action_a and action_b and action_a != action_b),
        })
    order = {"new": 0, "gone": 1, "up": 2, "down": 3, "same": 4}
    reasons.sort(key=lambda r: (order[r["status"]], -abs(r["delta"]), r["reason"]))
    sa = {s["name"]: s for s in a.get("stages", [])}
    sb = {s["name"]: s for s in b.get("stages", [])}
    stages = [{"stage": n, "dropped_a": sa.get(n, {}).get("dropped"),
               "dropped_b": sb.get(n, {}).get("dropped"),
               "seconds_a": sa.get(n, {}).get("seconds"), "seconds_b": sb.get(n, {}).get("seconds")}
              for n in [*sa, *[n for n in sb if n not in sa]]]
    va, vb = a.get("verdict") or {}, b.get("verdict") or {}
    return {
        "same_pipeline": a.get("pipeline", {}).get("config_hash")
        == b.get("pipeline", {}).get("config_hash"),
        "same_input": a.get("input", {}).get("fingerprint")
        == b.get("input", {}).get("fingerprint"),
        "totals": totals,
        "reasons": reasons,
        "new_reasons": [r["reason"] for r in reasons if r["status"] == "new"],
        "gone_reasons": [r["reason"] for r in reasons if r["status"] == "gone"],
        "stages": stages,
        "verdict": {"a": va.get("passed"), "b": vb.get("passed"),
                    "newly_failing_rules": sorted(
                        {r["name"] for r in vb.get("rules", []) if not r["passed"]}
                        - {r["name"] for r in va.get("rules", []) if not r["passed"]})},
    }


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.2f}%"


def _signed(x: int) -> str:
    return f"{x:+,}" if x else "0"


def render_diff(d: dict[str, Any], a_name: str = "A", b_name: str = "B") -> str:
    """The diff as Markdown (readable in a terminal and in a pull-request comment)."""
    from cleanpipe.report.markdown import cell

    out = [f"## cleanpipe diff: {cell(a_name)} → {cell(b_name)}", ""]
    notes = []
    notes.append("same pipeline config" if d["same_pipeline"] else "**pipeline config changed**")
    notes.append("same input" if d["same_input"] else "**input changed**")
    v = d["verdict"]
    if v["a"] is not None or v["b"] is not None:
        word = {True: "pass", False: "FAIL", None: "no gate"}
        notes.append(f"gate: {word[v['a']]} → {word[v['b']]}")
    out += [", ".join(notes), ""]
    if v["newly_failing_rules"]:
        out += ["Newly failing gate rules: "
                + ", ".join(cell(n) for n in v["newly_failing_rules"]), ""]
    out += ["| rows | A | B | Δ |", "|---|---|---|---|"]
    out += [f"| {k} | {t['a']:,} | {t['b']:,} | {_signed(t['delta'])} |"
            for k, t in d["totals"].items()]
    out.append("")
    if d["reasons"]:
        out += ["| reason | status | action | A rows | B rows | Δ | A % | B % |",
                "|---|---|---|---|---|---|---|---|"]
        for r in d["reasons"]:
            action = r["action_b"] or r["action_a"] or ""
            if r["action_changed"]:
                action = f"{r['action_a']} → {r['action_b']}"
            out.append(f"| {cell(r['reason'])} | {r['status']} | {cell(action)} | {r['a']:,} | "
                       f"{r['b']:,} | {_signed(r['delta'])} | {_pct(r['share_a'])} | "
                       f"{_pct(r['share_b'])} |")
        out.append("")
    else:
        out += ["No check fired in either run.", ""]
    return "\n".join(out)


def cmd_diff(args: argparse.Namespace) -> int:
    from cleanpipe.report import load_report

    reports = []
    for path in (args.a, args.b):
        try:
            reports.append(load_report(path))
        except (OSError, ValueError) as e:
            print(f"cleanpipe diff: {path}: cannot read the report: {e}", file=sys.stderr)
            return ExitCode.UNREADABLE
    d = diff_reports(*reports)
    if args.json:
        print(json.dumps(d, indent=2, ensure_ascii=False))
    else:
        print(render_diff(d, args.a, args.b))
    if args.fail_on_new and d["new_reasons"]:
        print(f"cleanpipe diff: new reasons in {args.b}: {', '.join(d['new_reasons'])}",
              file=sys.stderr)
        return ExitCode.GATE_FAILED
    return ExitCode.PASSED


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "diff", help="what changed between two runs' report.json (counts per reason, new reasons)",
        description="Compare two reports (a report.json, or the folder holding it): totals, rows "
                    "per reason, new and gone reasons, stage drops, gate verdict.")
    p.add_argument("a", help="the earlier run's report.json (or its folder)")
    p.add_argument("b", help="the later run's report.json (or its folder)")
    p.add_argument("--json", action="store_true", help="print the diff as JSON")
    p.add_argument("--fail-on-new", action="store_true",
                   help="exit 1 when B has a reason that did not fire in A")
    p.set_defaults(func=cmd_diff)
