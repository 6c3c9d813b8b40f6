"""report.html: one self-contained page a person reads before launching a training run.

Everything is inline (CSS and SVG drawn here, in Python); the page has no script at all and
a Content-Security-Policy that forbids scripts and network loads, so a report built from
hostile data (every value goes through :func:`esc`) cannot run anything when opened.

    >>> page = render_html({"pipeline": {"name": "<b>x</b>"}, "totals": {"read": 0}})
    >>> "&lt;b&gt;x&lt;/b&gt;" in page and "<script" not in page
    True
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from typing import Any

from cleanpipe.report import tokens
from cleanpipe.report.text import codepoint_label, diff_snippets, visible
from cleanpipe.report.tokens import BOUND_NOTE, any_bounded, token_figures, total_text

__all__ = ["esc", "render_html"]

ACTION_COLORS = {"drop": "#d1495b", "fix": "#2e86ab", "flag": "#edae49", "fail": "#6a040f"}
BEFORE, AFTER, BOUNDED = "#9aa5b1", "#2e86ab", "#c9a227"
CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
       "script-src 'none'; base-uri 'none'; form-action 'none'")


def esc(value: Any, *, keep_newlines: bool = False) -> str:
    """HTML-escape ``value`` (quotes included) after making invisible characters visible."""
    return html.escape(visible("" if value is None else str(value),
                               keep_newlines=keep_newlines), quote=True)


def _fmt(x: float) -> str:
    if isinstance(x, float) and not x.is_integer():
        return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.3g}"
    return f"{int(x):,}"


def _short(label: str, width: int) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"


# --- SVG charts --------------------------------------------------------------------------

def hbar_chart(title: str, items: Sequence[tuple[str, float, str]], *,
               label_width: int = 300, width: int = 760) -> str:
    """Horizontal bars, one per ``(label, value, color)``, longest first as given."""
    if not items:
        return ""
    row_h, top = 22, 8
    height = top + row_h * len(items) + 8
    vmax = max(v for _, v, _ in items) or 1
    span = width - label_width - 80
    parts = [f'<svg class="plot" role="img" aria-label="{esc(title)}" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" '
             'xmlns="http://www.w3.org/2000/svg">']
    for i, (label, value, color) in enumerate(items):
        y = top + i * row_h
        w = max(1.0, span * value / vmax) if value else 0.0
        parts.append(
            f'<text x="{label_width - 6}" y="{y + 15}" text-anchor="end" class="lbl">'
            f"{esc(_short(label, 46))}</text>"
            f'<rect x="{label_width}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" '
            f'fill="{color}"><title>{esc(label)}: {_fmt(value)}</title></rect>'
            f'<text x="{label_width + w + 4:.1f}" y="{y + 15}" class="val">{_fmt(value)}</text>'
        )
    parts.append("</svg>")
    return f'<figure><figcaption>{esc(title)}</figcaption>{"".join(parts)}</figure>'


def _edge_label(lo: float, hi: float | None) -> str:
    return f"≥{_fmt(lo)}" if hi is None else f"{_fmt(lo)}–{_fmt(hi)}"


def histogram_chart(title: str, series: Sequence[tuple[str, dict[str, Any], str]], *,
                    width: int = 720, height: int = 240) -> str:
    """Grouped vertical bars: one group per bucket, one bar per ``(name, hist, color)``.

    Histograms with different edges cannot share buckets; each then gets its own chart.
    """
    series = [s for s in series if s[1] and s[1].get("counts")]
    if not series:
        return ""
    edges = series[0][1]["edges"]
    if any(s[1]["edges"] != edges for s in series[1:]):
        return "".join(histogram_chart(f"{title}: {name}", [(name, h, c)], width=width,
                                       height=height) for name, h, c in series)
    # Fixed bucket edges span far more than one dataset uses: show only the occupied range.
    used = [b for b in range(len(series[0][1]["counts"]))
            if any(h["counts"][b] for _, h, _ in series)]
    if not used:
        return ""
    first, last = used[0], used[-1] + 1
    edges = list(edges[first:last + 1])
    series = [(name, {"edges": edges, "counts": list(h["counts"][first:last])}, c)
              for name, h, c in series]
    n = last - first
    left, bottom, top = 56, 46, 10
    plot_w, plot_h = width - left - 10, height - bottom - top
    vmax = max(max(h["counts"]) for _, h, _ in series) or 1
    group_w = plot_w / n
    bar_w = max(1.0, (group_w - 2) / len(series))
    parts = [f'<svg class="plot" role="img" aria-label="{esc(title)}" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" '
             'xmlns="http://www.w3.org/2000/svg">',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{width - 10}" y2="{top + plot_h}" '
             'class="axis"/>',
             f'<text x="{left - 4}" y="{top + 10}" text-anchor="end" class="val">'
             f"{_fmt(vmax)}</text>",
             f'<text x="{left - 4}" y="{top + plot_h}" text-anchor="end" class="val">0</text>']
    step = max(1, math.ceil(n * 52 / plot_w))  # about 52 px per tick label: no overlaps
    for b in range(n):
        lo = edges[b]
        hi = edges[b + 1] if b + 1 < len(edges) else None
        x0 = left + b * group_w
        for k, (name, h, color) in enumerate(series):
            c = h["counts"][b]
            bh = plot_h * c / vmax
            if c:
                bh = max(bh, 1.0)
            parts.append(
                f'<rect x="{x0 + 1 + k * bar_w:.1f}" y="{top + plot_h - bh:.1f}" '
                f'width="{bar_w:.1f}" height="{bh:.1f}" fill="{color}">'
                f"<title>{esc(name)} {esc(_edge_label(lo, hi))}: {_fmt(c)}</title></rect>"
            )
        if b % step == 0:
            # the label is the bucket's lower edge, so it sits on the bucket's left border
            parts.append(f'<line x1="{x0:.1f}" y1="{top + plot_h}" x2="{x0:.1f}" '
                         f'y2="{top + plot_h + 4}" class="axis"/>'
                         f'<text x="{x0:.1f}" y="{top + plot_h + 15}" '
                         f'text-anchor="middle" class="tick">{esc(_fmt(lo))}</text>')
    legend_x = left
    for name, _, color in series:
        parts.append(f'<rect x="{legend_x}" y="{height - 16}" width="10" height="10" '
                     f'fill="{color}"/><text x="{legend_x + 14}" y="{height - 7}" '
                     f'class="lbl">{esc(name)}</text>')
        legend_x += 14 + 8 * len(name) + 20
    parts.append("</svg>")
    return f'<figure><figcaption>{esc(title)}</figcaption>{"".join(parts)}</figure>'


# --- page sections -----------------------------------------------------------------------

def _codepoints(report: dict[str, Any]) -> dict[str, float]:
    """Invisible characters by code point, summed over every stage that reports them."""
    out: dict[str, float] = {}
    for st in report.get("stages", []):
        cps = st.get("metrics", {}).get("codepoints")
        if isinstance(cps, dict):
            for k, v in cps.items():
                if isinstance(v, (int, float)):
                    out[k] = out.get(k, 0) + v
    return out


def _token_series(d: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    """Before and after; and, where rows were placed by an upper bound of their length
    instead of being tokenized, those rows as a series of their own."""
    series = [(tokens.BEFORE_HEADING, d.get("tokens_before"), BEFORE),
              (tokens.AFTER_HEADING, d.get("tokens_after"), AFTER)]
    before = d.get("tokens_before") or {}
    if any(before.get("bounded") or ()):
        series.append(("before, placed by a bound", {"edges": before["edges"],
                                                     "counts": before["bounded"]}, BOUNDED))
    return series


def _plots(report: dict[str, Any]) -> str:
    d = report.get("distributions", {})
    figs = [
        histogram_chart("Characters per row", [("before", d.get("chars_before"), BEFORE),
                                                ("after", d.get("chars_after"), AFTER)]),
        histogram_chart("Tokens per row", _token_series(d)),
    ]
    reasons = sorted((r for r in report.get("reasons", []) if r["rows"]),
                     key=lambda r: (-r["rows"], r["stage"], r["code"]))
    figs.append(hbar_chart(
        "Rows per reason (colour: action)",
        [(f"{r['stage']}/{r['code']} ({r['action']})", r["rows"],
          ACTION_COLORS.get(r["action"], "#555")) for r in reasons[:40]]))
    cps = sorted(_codepoints(report).items(), key=lambda kv: (-kv[1], kv[0]))
    figs.append(hbar_chart("Invisible characters by code point",
                           [(codepoint_label(k), v, "#7b2cbf") for k, v in cps[:40]]))
    labels = sorted(d.get("labels", {}).items(), key=lambda kv: (-kv[1], kv[0]))
    items = [(str(k), v, "#3a7d44") for k, v in labels[:40]]
    if len(labels) > 40:
        items.append((f"({len(labels) - 40} more labels)", sum(v for _, v in labels[40:]),
                      "#8d99ae"))
    figs.append(hbar_chart("Rows per label", items))
    figs = [f for f in figs if f]
    if not figs:
        return ""
    return '<section><h2>Distributions</h2><div class="plots">' + "".join(figs) + "</div></section>"


def _tokens(report: dict[str, Any]) -> str:
    """The totals the stages publish (tokens, supervised tokens, rows over the window)."""
    figures = token_figures(report)
    if not figures:
        return ""
    rows = [[esc(f.stage), esc(f.figure), esc(total_text(f.before)), esc(total_text(f.after))]
            for f in figures]
    return ("<section><h2>Tokens</h2>"
            + _table(list(tokens.COLUMNS), rows, "num")
            + (f'<p class="note">{esc(BOUND_NOTE)}</p>' if any_bounded(figures) else "")
            + "</section>")


def _fields(report: dict[str, Any]) -> str:
    """Per text field: strings, empty ones, mean and longest length, before → after."""
    f = report.get("distributions", {}).get("fields")
    if not f:
        return ""

    def value(stats: dict[str, int] | None, key: str) -> str:
        if stats is None:
            return "–"
        if key == "mean":
            return _fmt(round(stats["chars"] / stats["strings"], 1) if stats["strings"] else 0)
        return _fmt(stats[key])

    def pair(name: str, key: str) -> str:
        return esc(" → ".join(value(f[side].get(name), key) for side in ("before", "after")))

    names = list(dict.fromkeys([*f["before"], *f["after"]]))
    rows = [[esc(n), pair(n, "strings"), pair(n, "empty"), pair(n, "mean"),
             pair(n, "max_chars")] for n in names]
    return ("<section><h2>Characters per field</h2><p class=\"note\">as read → after "
            "cleaning (kept rows)</p>"
            + _table(["field", "strings", "empty", "mean characters", "longest"], rows, "num")
            + "</section>")


def _diagnostics(report: dict[str, Any]) -> str:
    """Memory and timing internals of the stages, collapsed: for whoever tunes cleanpipe,
    not for judging the data."""
    parts = []
    for st in report.get("stages", []):
        for key, value in (st.get("diagnostics") or {}).items():
            rows = ([[esc(k), esc(_compact(v))] for k, v in value.items()]
                    if isinstance(value, dict) else [[esc(key), esc(_compact(value))]])
            parts.append(f"<h4>{esc(st['name'])}: {esc(key)}</h4>"
                         + _table(["", ""], rows, "meta"))
    if not parts:
        return ""
    return ("<section><details><summary>Diagnostics (memory and timing internals)</summary>"
            + "".join(parts) + "</details></section>")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _verdict(report: dict[str, Any]) -> str:
    v = report.get("verdict")
    if v is None:
        return '<div class="banner none">No gate configured</div>'
    cls, word = ("pass", "Gate passed") if v["passed"] else ("fail", "Gate FAILED")
    rules = sorted(v["rules"], key=lambda r: r["passed"])
    rows = [[f'<span class="{"ok" if r["passed"] else "bad"}">{"✔" if r["passed"] else "✘"}'
             "</span>", esc(r["name"]), esc(r["message"]),
             esc("" if r["value"] is None else _fmt(r["value"])),
             esc("" if r["limit"] is None else _fmt(r["limit"]))] for r in rules]
    return (f'<div class="banner {cls}">{word} — exit code {int(v["exit_code"])}</div>'
            + (_table(["", "rule", "result", "value", "limit"], rows) if rows else ""))


def _totals(report: dict[str, Any]) -> str:
    t = report.get("totals", {})
    timing = report.get("timing", {})
    cards = [(k, t.get(k, 0)) for k in ("read", "kept", "quarantined", "changed", "flagged",
                                          "failed")]
    html_cards = "".join(f'<div class="card"><div class="n">{esc(_fmt(v))}</div>'
                         f'<div class="k">{esc(k)}</div></div>' for k, v in cards)
    if timing:
        html_cards += (f'<div class="card"><div class="n">{esc(_fmt(timing["wall_seconds"]))} s'
                       f'</div><div class="k">{esc(_fmt(timing["rows_per_second"]))} rows/s'
                       "</div></div>")
    return f'<div class="cards">{html_cards}</div>'


def _stages(report: dict[str, Any]) -> str:
    stages = report.get("stages", [])
    if not stages:
        return ""
    rows = [[esc(s["index"]), esc(s["name"]), esc(_fmt(s["rows_in"])), esc(_fmt(s["rows_out"])),
             esc(_fmt(s["changed"])), esc(_fmt(s["dropped"])), esc(_fmt(s["flagged"])),
             esc(_fmt(s["failed"])), esc(f"{s['seconds']:.2f}")] for s in stages]
    return ("<section><h2>Stages</h2>"
            + _table(["#", "stage", "rows in", "rows out", "changed", "dropped", "flagged",
                      "failed", "seconds"], rows, "num") + "</section>")


def _reasons(report: dict[str, Any]) -> str:
    read = report.get("totals", {}).get("read", 0)
    reasons = sorted((r for r in report.get("reasons", []) if r["rows"] or r["events"]),
                     key=lambda r: (-r["rows"], r["stage"], r["code"]))
    if not reasons:
        return "<section><h2>Reasons</h2><p>No check fired.</p></section>"
    rows = [[esc(r["stage"]), esc(r["code"]),
             f'<span class="act {esc(r["action"])}">{esc(r["action"])}</span>',
             esc(_fmt(r["rows"])), esc(f"{100 * r['rows'] / read:.2f}%" if read else "–"),
             esc(_fmt(r["events"]))] for r in reasons]
    return ("<section><h2>Reasons</h2>"
            + _table(["stage", "code", "action", "rows", "% of read", "events"], rows, "num")
            + "</section>")


def _examples(report: dict[str, Any], width: int = 240) -> str:
    examples = report.get("examples", [])
    if not examples:
        return ""
    rows = []
    for e in examples:
        before, after = diff_snippets(e.get("before"), e.get("after"), width)
        rows.append([esc(f"{e['stage']}/{e['code']}"),
                     f'<span class="act {esc(e["action"])}">{esc(e["action"])}</span>',
                     f'<code>{esc(e["row_id"])}</code>', esc(e.get("field")),
                     esc(e.get("detail")), f'<pre>{esc(before, keep_newlines=True)}</pre>',
                     f'<pre>{esc(after, keep_newlines=True)}</pre>'])
    return ("<section><h2>Examples</h2><p class=\"note\">Invisible characters are shown as "
            "⟨U+XXXX⟩, newlines as ⏎ kept in place.</p>"
            + _table(["reason", "action", "row", "field", "detail", "before", "after"], rows,
                     "examples") + "</section>")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _compact(v: Any, width: int = 160) -> str:
    """One value as short text: dicts as ``k: v · k: v``, lists one item per line (5 shown)."""
    if isinstance(v, dict):
        text = " · ".join(f"{k}: {_compact(x, width)}" for k, x in v.items())
    elif isinstance(v, list):
        lines = [_compact(x, width) for x in v[:5]]
        if len(v) > 5:
            lines.append(f"… {len(v) - 5} more")
        return "\n".join(lines)
    elif _is_number(v):
        text = _fmt(v)
    else:
        text = "" if v is None else str(v)
    return text if len(text) <= width else text[: width - 1] + "…"


def _sections(report: dict[str, Any], max_rows: int = 20) -> str:
    """Stage-specific sections (duplicate clusters, contamination, ...), shaped by their data:
    scalars in one table, ``{name: number}`` maps as bar charts, lists of records as tables."""
    parts = []
    for st in report.get("stages", []):
        section = st.get("section") or {}
        if not section:
            continue
        scalars, blocks = [], []
        for key, value in section.items():
            title = f"{st['name']}: {key}"
            if value is None or isinstance(value, (str, int, float, bool)):
                scalars.append([esc(key), esc(_compact(value))])
            elif isinstance(value, dict) and value and all(_is_number(v) for v in value.values()):
                blocks.append(hbar_chart(title, [(str(k), v, "#5c677d")
                                                 for k, v in list(value.items())[:40]]))
            elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                cols: list[str] = []
                for v in value[:max_rows]:
                    cols += [k for k in v if k not in cols]
                rows = [[f"<pre>{esc(_compact(v.get(c)), keep_newlines=True)}</pre>"
                         for c in cols] for v in value[:max_rows]]
                more = (f"<p class=\"note\">{len(value) - max_rows} more not shown.</p>"
                        if len(value) > max_rows else "")
                blocks.append(f"<h4>{esc(title)}</h4>" + _table(cols, rows, "examples") + more)
            elif isinstance(value, dict):
                rows = [[esc(k), f"<pre>{esc(_compact(v), keep_newlines=True)}</pre>"]
                        for k, v in value.items()]
                blocks.append(f"<h4>{esc(title)}</h4>" + _table(["", ""], rows, "meta"))
            else:
                blocks.append(f"<h4>{esc(title)}</h4><pre>"
                              f"{esc(_compact(value), keep_newlines=True)}</pre>")
        head = _table(["", ""], scalars, "meta") if scalars else ""
        parts.append(f"<h3>{esc(st['name'])}</h3>{head}{''.join(blocks)}")
    return "<section><h2>Stage details</h2>" + "".join(parts) + "</section>" if parts else ""


def _meta(report: dict[str, Any]) -> str:
    p, i, o = report.get("pipeline", {}), report.get("input", {}), report.get("output", {})
    rows = [
        ["pipeline", esc(p.get("name")), ], ["pipeline file", esc(p.get("path"))],
        ["config hash", f"<code>{esc(p.get('config_hash'))}</code>"],
        ["input", esc(", ".join(i.get("paths", [])))],
        ["input files / bytes", esc(f"{_fmt(i.get('files', 0))} / {_fmt(i.get('bytes', 0))}")],
        ["input fingerprint", f"<code>{esc(i.get('fingerprint'))}</code>"],
        ["output", esc(f"{o.get('path')} ({o.get('format')}, "
                       f"{'written' if o.get('written') else 'not written'})")],
        ["started", esc(report.get("timing", {}).get("started"))],
        ["cleanpipe", esc(report.get("cleanpipe_version"))],
    ] + [[esc(k), esc(v)] for k, v in sorted(report.get("versions", {}).items())
         if k != "cleanpipe"]
    config = json.dumps(p.get("config", {}), ensure_ascii=False, indent=2, default=str)
    return ("<section><h2>Run</h2>" + _table(["", ""], rows, "meta")
            + f"<details><summary>Pipeline config</summary><pre>"
            f"{esc(config, keep_newlines=True)}</pre></details></section>")


STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","Noto Sans CJK SC",
sans-serif;margin:0 auto;max-width:1200px;padding:16px 24px;color:#1f2933;background:#fff}
h1{font-size:22px;margin:4px 0 12px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid
#e4e7eb;padding-bottom:4px}h3{font-size:15px;margin:16px 0 6px}h4{font-size:14px;margin:12px 0 4px}
.banner{padding:10px 14px;border-radius:6px;font-weight:600;font-size:16px;margin:8px 0}
.banner.pass{background:#e3f9e5;color:#05400a;border:1px solid #57ae5b}
.banner.fail{background:#ffe3e3;color:#610404;border:1px solid #e12d39}
.banner.none{background:#f0f4f8;color:#334e68;border:1px solid #bcccdc}
.ok{color:#2f8132;font-weight:700}.bad{color:#cf1124;font-weight:700}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}
.card{border:1px solid #e4e7eb;border-radius:6px;padding:8px 14px;min-width:90px}
.card .n{font-size:20px;font-weight:600}.card .k{color:#616e7c;font-size:12px}
table{border-collapse:collapse;margin:6px 0;width:100%}
th,td{border-bottom:1px solid #e4e7eb;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f5f7fa;font-weight:600}table.num td{font-variant-numeric:tabular-nums}
table.examples td{max-width:420px;overflow-wrap:anywhere}
pre{margin:0;white-space:pre-wrap;overflow-wrap:anywhere;font:12px/1.4 ui-monospace,
"SFMono-Regular",Menlo,Consolas,monospace;max-height:12em;overflow:auto}
code{font:12px ui-monospace,Menlo,Consolas,monospace;overflow-wrap:anywhere}
.act{padding:1px 6px;border-radius:3px;color:#fff;font-size:12px}
.act.drop{background:#d1495b}.act.fix{background:#2e86ab}.act.flag{background:#b7791f}
.act.fail{background:#6a040f}.note{color:#616e7c;font-size:12px}
.plots{display:flex;flex-wrap:wrap;gap:16px}figure{margin:0}
figcaption{font-weight:600;margin:4px 0}svg .lbl{font-size:12px;fill:#1f2933}
svg .val,svg .tick{font-size:11px;fill:#616e7c}svg .axis{stroke:#9aa5b1}
"""


def render_html(report: dict[str, Any]) -> str:
    """The self-contained HTML page for ``report``."""
    name = report.get("pipeline", {}).get("name", "pipeline")
    body = "".join([
        f"<h1>cleanpipe report: {esc(name)}</h1>",
        _verdict(report), _totals(report), _plots(report), _tokens(report), _fields(report),
        _stages(report),
        _reasons(report), _examples(report), _sections(report), _diagnostics(report),
        _meta(report),
    ])
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>cleanpipe report: {esc(name)}</title><style>{STYLE}</style></head>"
            f"<body>{body}</body></html>\n")
