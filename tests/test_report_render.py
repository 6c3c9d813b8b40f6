"""report.md, report.html and junit.xml rendered from report dicts, hostile data included."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from cleanpipe.gate import GateConfig, evaluate
from cleanpipe.report import (
    example_report,
    render_html,
    render_junit,
    render_markdown,
    write_reports,
)
from cleanpipe.report._example import hostile_report
from cleanpipe.report.text import diff_snippets, visible
from tests.conftest import realdata

HANDMADE = ["<script>window.__pwned=1</script>", "a|b|c", "`code` **bold** [x](javascript:1)",
            "\" onmouseover=\"alert(1)", "zero\u200bwidth\u2028line", "</td></tr></table>",
            "<img src=x onerror=alert(1)>", "患者\ufeff主诉", "&amp; &lt;", "-->", "\x00\x07"]


def blns_strings() -> list[str]:
    return json.loads(realdata("blns", "blns.json").read_text("utf-8"))


# --- text helpers ----------------------------------------------------------------------

def test_visible_marks_invisible_and_lookalike_characters() -> None:
    assert visible("a\u200bb\u202ec\u3000d\x07e f") == "a⟨U+200B⟩b⟨U+202E⟩c⟨U+3000⟩d⟨U+0007⟩e f"
    assert visible("x\ny\tz") == "x⏎y⇥z"
    assert visible("x\ny", keep_newlines=True) == "x\ny"
    assert visible("中文 émoji 🙂") == "中文 émoji 🙂"


def test_diff_snippets_show_a_change_deep_in_a_long_text() -> None:
    before = "a" * 500 + "Ã©" + "b" * 500
    after = "a" * 500 + "é" + "b" * 500
    b, a = diff_snippets(before, after, 80)
    assert "Ã©" in b and "é" in a and b.startswith("…")
    assert diff_snippets("short", None, 80) == ("short", "")


# --- markdown -----------------------------------------------------------------------------

def _unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def _check_markdown_tables(md: str) -> None:
    block: list[str] = []
    for line in [*md.splitlines(), ""]:
        if line.startswith("|"):
            block.append(line)
        elif block:
            widths = {_unescaped_pipes(r) for r in block}
            assert len(widths) == 1, f"table rows with different column counts: {block[:3]}"
            block = []


def test_markdown_summary_has_verdict_tables_and_examples() -> None:
    r = example_report()
    md = render_markdown(r)
    assert md.startswith("## cleanpipe: sft-example — ❌ gate FAILED (exit code 1)")
    assert "**1,000** rows read, **962** kept, **38** quarantined (3.80%)" in md
    for reason in r["reasons"]:
        assert re.search(rf"\| {re.escape(reason['code'].replace('_', chr(92) + '_'))} \|", md)
    assert "Hello⟨U+200B⟩ world⟨U+FEFF⟩" in md
    # failed rules come first in the gate table
    gate_rows = [ln for ln in md.splitlines() if ln.startswith("| ❌") or ln.startswith("| ✅")]
    assert gate_rows[0].startswith("| ❌")
    _check_markdown_tables(md)


def test_markdown_without_gate_and_read_only() -> None:
    r = example_report()
    del r["verdict"]
    r["output"] = {"path": None, "format": "parquet", "written": False}
    md = render_markdown(r)
    assert "no gate configured" in md and "Read-only run" in md and "### Gate" not in md


@pytest.mark.realdata
@pytest.mark.parametrize("source", ["handmade", "blns"])
def test_markdown_escapes_hostile_data(source: str) -> None:
    strings = HANDMADE if source == "handmade" else blns_strings()
    md = render_markdown(hostile_report(strings), max_examples=len(strings) + 10)
    assert "<" not in md and ">" not in md.replace("&gt;", "")  # no markup at all survives
    _check_markdown_tables(md)


def test_step_summary_is_appended(tmp_path, monkeypatch) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n", "utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    r = example_report()
    write_reports(r, tmp_path / "a")
    write_reports(r, tmp_path / "b", formats=("json",))
    text = summary.read_text("utf-8")
    assert text.startswith("earlier step\n")
    assert text.count("## cleanpipe: sft-example") == 2
    assert (tmp_path / "a" / "report.md").read_text("utf-8") in text


# --- html ---------------------------------------------------------------------------------

class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def _parse(page: str) -> _Collect:
    p = _Collect()
    p.feed(page)
    p.close()
    return p


ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "h4", "div",
                "p", "section", "table", "thead", "tbody", "tr", "th", "td", "span", "code", "pre",
                "details", "summary", "figure", "figcaption", "svg", "rect", "text", "line"}


def _check_page_is_inert(page: str) -> _Collect:
    parsed = _parse(page)
    tags = {t for t, _ in parsed.tags}
    assert tags <= ALLOWED_TAGS, tags - ALLOWED_TAGS
    for tag, attrs in parsed.tags:
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name, value)
            assert name not in {"src", "href", "srcset", "action", "formaction"}, (tag, name)
            # nothing is loaded from anywhere: the only URL is the SVG namespace
            if value and "://" in value:
                assert (name, value) == ("xmlns", "http://www.w3.org/2000/svg"), (tag, name)
    assert "url(" not in page.split("</style>")[0]  # no CSS fetches either
    return parsed


def test_html_has_plots_tables_and_csp() -> None:
    r = example_report()
    page = render_html(r)
    parsed = _check_page_is_inert(page)
    metas = [a for t, a in parsed.tags if t == "meta" and a.get("http-equiv")]
    assert "script-src 'none'" in metas[0]["content"]
    assert [a.get("aria-label") for t, a in parsed.tags if t == "svg"] == [
        "Characters per row", "Tokens per row", "Rows per reason (colour: action)",
        "Invisible characters by code point", "Rows per label"]
    text = "".join(parsed.text)
    assert "U+200B ZERO WIDTH SPACE" in text and "U+202E RIGHT-TO-LEFT OVERRIDE" in text
    assert "Hello⟨U+200B⟩ world⟨U+FEFF⟩" in text
    assert "duplicate of train.jsonl:12" in text and "把下面的句子翻译成英文" in text
    # one bar per reason that fired, with its count in the tooltip
    bars = re.findall(r"<title>([^<]*\(drop\)): (\d+)</title>", page)
    assert dict(bars) == {f"{x['stage']}/{x['code']} (drop)": str(x["rows"])
                          for x in r["reasons"] if x["action"] == "drop"}


def test_html_histograms_with_different_edges_get_separate_charts() -> None:
    r = example_report()
    r["distributions"]["chars_after"]["edges"] = [e * 2 for e in
                                                  r["distributions"]["chars_after"]["edges"]]
    page = render_html(r)
    assert "Characters per row: before" in page and "Characters per row: after" in page


def test_html_without_optional_sections() -> None:
    r = example_report()
    r["distributions"] = {}
    r["examples"] = []
    r["reasons"] = []
    for s in r["stages"]:
        s["metrics"], s["section"] = {}, {}
    page = render_html(r)
    _check_page_is_inert(page)
    assert "<svg" not in page and "No check fired." in page


@pytest.mark.realdata
@pytest.mark.parametrize("source", ["handmade", "blns"])
def test_html_escapes_hostile_data(source: str) -> None:
    strings = HANDMADE if source == "handmade" else blns_strings()
    page = render_html(hostile_report(strings))
    parsed = _check_page_is_inert(page)
    text = "".join(parsed.text)
    # every string comes back as text (made visible), never as markup
    for s in strings:
        if len(s) < 200:
            assert visible(s, keep_newlines=True) in text, s


# --- junit --------------------------------------------------------------------------------

def test_junit_has_one_case_per_rule_and_parses_back() -> None:
    r = example_report()
    r["verdict"] = evaluate(r, GateConfig(max_dropped_fraction=0.01, never=["zero_width"],
                                          min_rows_out=10))
    root = ET.fromstring(render_junit(r).encode("utf-8"))
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [x["name"] for x in r["verdict"]["rules"]]
    failed = {c.get("name"): c.find("failure").get("message") for c in cases
              if c.find("failure") is not None}
    assert set(failed) == {"max_dropped_fraction", "never[zero_width]"}
    assert failed["never[zero_width]"] == "zero_width fired on 29 row(s); it must never fire"
    assert suite.get("tests") == str(len(cases)) and suite.get("failures") == "2"
    assert root.get("failures") == "2"


def test_junit_survives_hostile_names() -> None:
    r = hostile_report(HANDMADE)
    root = ET.fromstring(render_junit(r).encode("utf-8"))
    names = [c.get("name") for c in root.iter("testcase")]
    assert len(names) == len(r["verdict"]["rules"])


def test_junit_without_gate_is_an_empty_suite() -> None:
    r = example_report()
    del r["verdict"]
    root = ET.fromstring(render_junit(r).encode("utf-8"))
    assert root.get("tests") == "0" and list(root.iter("testcase")) == []


def test_histogram_shows_only_the_occupied_buckets() -> None:
    from cleanpipe.report.html import histogram_chart

    edges = [0, 8, 16, 32, 64, 128, 256, 512]
    svg = histogram_chart("chars", [("before", {"edges": edges,
                                                "counts": [0, 0, 5, 9, 0, 2, 0]}, "#000")])
    bars = re.findall(r"<title>before ([^:]*): (\d+)</title>", svg)
    assert bars == [("16–32", "5"), ("32–64", "9"), ("64–128", "0"), ("128–256", "2")]
    assert histogram_chart("chars", [("before", {"edges": edges, "counts": [0] * 7},
                                      "#000")]) == ""
