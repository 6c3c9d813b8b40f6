"""report.md: a short summary for a CI job page (and ``$GITHUB_STEP_SUMMARY``).

Verdict first (what a reviewer needs), then totals, the gate rules, the stages and reasons
tables and a few examples. Cell text is escaped so data can neither break the tables nor
inject markup: GitHub renders inline HTML in step summaries.

    >>> from cleanpipe.report.markdown import cell
    >>> cell("a|b <script>\\u200b")
    'a\\\\|b &lt;script&gt;⟨U+200B⟩'
"""

from __future__ import annotations

import html
import re
from typing import Any

from cleanpipe.report.text import diff_snippets, visible
from cleanpipe.report.tokens import BOUND_NOTE, COLUMNS, any_bounded, token_figures, total_text

__all__ = ["cell", "render_markdown"]

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|#~])")


def cell(value: Any, width: int | None = None) -> str:
    """``value`` as one safe Markdown table cell: HTML-escaped, Markdown specials
    backslash-escaped, invisible characters and newlines made visible."""
    text = "" if value is None else str(value)
    if width is not None and len(text) > width:
        text = text[: width - 1] + "…"
    text = html.escape(visible(text), quote=False)
    return _MD_SPECIAL.sub(r"\\\1", text)


def _num(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:,.3g}" if abs(x) < 1000 else f"{x:,.0f}"
    if isinstance(x, int):
        return f"{x:,}"
    return cell(x)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def render_markdown(report: dict[str, Any], *, max_examples: int = 10,
                    snippet_width: int = 80) -> str:
    """The Markdown summary of ``report``."""
    out: list[str] = []
    name = report.get("pipeline", {}).get("name", "pipeline")
    verdict = report.get("verdict")
    if verdict is None:
        status = "no gate configured"
    elif verdict["passed"]:
        status = "✅ gate passed"
    else:
        status = f"❌ gate FAILED (exit code {verdict['exit_code']})"
    out.append(f"## cleanpipe: {cell(name)} — {status}")
    out.append("")

    t = report.get("totals", {})
    timing = report.get("timing", {})
    read = t.get("read", 0)
    pct = f" ({100 * t.get('quarantined', 0) / read:.2f}%)" if read else ""
    out.append(
        f"**{_num(read)}** rows read, **{_num(t.get('kept', 0))}** kept, "
        f"**{_num(t.get('quarantined', 0))}** quarantined{pct}, "
        f"{_num(t.get('changed', 0))} changed, {_num(t.get('flagged', 0))} flagged, "
        f"{_num(t.get('failed', 0))} failed"
        + (f" — {timing['wall_seconds']:.1f} s, {timing['rows_per_second']:,.0f} rows/s"
           if timing else "")
    )
    out_info = report.get("output", {})
    if out_info and not out_info.get("written", True):
        out.append("")
        out.append("Read-only run: no cleaned dataset was written.")
    out.append("")

    if verdict is not None and verdict["rules"]:
        out.append("### Gate")
        out.append("")
        rules = sorted(verdict["rules"], key=lambda r: r["passed"])
        out += _table(["", "rule", "result"],
                      [["✅" if r["passed"] else "❌", cell(r["name"]), cell(r["message"])]
                       for r in rules])
        out.append("")

    stages = report.get("stages", [])
    if stages:
        out.append("### Stages")
        out.append("")
        out += _table(
            ["#", "stage", "rows in", "rows out", "changed", "dropped", "flagged", "failed",
             "seconds"],
            [[str(s["index"]), cell(s["name"]), _num(s["rows_in"]), _num(s["rows_out"]),
              _num(s["changed"]), _num(s["dropped"]), _num(s["flagged"]), _num(s["failed"]),
              f"{s['seconds']:.2f}"] for s in stages],
        )
        out.append("")

    figures = token_figures(report)
    if figures:
        out.append("### Tokens")
        out.append("")
        out += _table(list(COLUMNS),
                      [[cell(f.stage), cell(f.figure), total_text(f.before),
                        total_text(f.after)] for f in figures])
        if any_bounded(figures):
            out += ["", BOUND_NOTE]
        out.append("")

    reasons = [r for r in report.get("reasons", []) if r["rows"] or r["events"]]
    if reasons:
        out.append("### Reasons")
        out.append("")
        reasons = sorted(reasons, key=lambda r: (-r["rows"], r["stage"], r["code"]))
        out += _table(
            ["stage", "code", "action", "rows", "% of read", "events"],
            [[cell(r["stage"]), cell(r["code"]), cell(r["action"]), _num(r["rows"]),
              f"{100 * r['rows'] / read:.2f}%" if read else "–", _num(r["events"])]
             for r in reasons],
        )
        out.append("")

    examples = _top_examples(report.get("examples", []), max_examples)
    if examples:
        out.append("### Examples")
        out.append("")
        rows = []
        for e in examples:
            before, after = diff_snippets(e.get("before"), e.get("after"), snippet_width)
            rows.append([cell(f"{e['stage']}/{e['code']}"), cell(e["action"]),
                         cell(e["row_id"], 60), cell(e.get("field")), cell(e.get("detail"), 60),
                         cell(before), cell(after)])
        out += _table(["reason", "action", "row", "field", "detail", "before", "after"], rows)
        out.append("")
    return "\n".join(out) + "\n"


def _top_examples(examples: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """Round-robin over reasons so every reason shows one example before any shows two."""
    by_reason: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for e in examples:
        by_reason.setdefault((e["stage"], e["code"]), []).append(e)
    out: list[dict[str, Any]] = []
    depth = 0
    while len(out) < limit and any(len(v) > depth for v in by_reason.values()):
        for v in by_reason.values():
            if len(v) > depth and len(out) < limit:
                out.append(v[depth])
        depth += 1
    return out
