"""report.html in headless Chromium: plots render, and hostile data (blns) runs no script.

Needs the Debian ``chromium`` package at /usr/bin/chromium (``.ci/run`` installs it) and the
``playwright`` Python package; never ``playwright install`` (it downloads a browser).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cleanpipe.report import example_report, write_reports
from cleanpipe.report._example import hostile_report
from tests.conftest import realdata

pytestmark = pytest.mark.browser

# Strings that run code the moment markup is interpreted, each setting the hook or raising a
# dialog: if escaping ever breaks, one of them fires.
PAYLOADS = ["<script>window.__pwned = 'script';</script>",
            "<img src=x onerror=\"window.__pwned='img'\">",
            "<svg onload=\"window.__pwned='svg'\"></svg>",
            "\"><script>alert('attr')</script>",
            "</pre></td></tr></table><script>window.__pwned='table'</script>",
            "<details open ontoggle=\"window.__pwned='details'\">",
            "<iframe srcdoc=\"<script>parent.__pwned='iframe'</script>\"></iframe>"]


def _open(browser, path: Path, *, bypass_csp: bool = False):
    """Load ``path``; returns (page, dialogs, requests) with every request but the file
    itself recorded (and refused), and every dialog recorded (and dismissed)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900},
                                  bypass_csp=bypass_csp)
    page = context.new_page()
    dialogs: list[str] = []
    requests: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))

    def route(r):
        if r.request.url == path.as_uri():
            r.continue_()
        else:
            requests.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page.goto(path.as_uri(), wait_until="load")
    page.wait_for_timeout(300)  # give onerror/onload handlers time to fire
    return page, dialogs, requests


def _plot_sizes(page) -> list[dict]:
    return page.eval_on_selector_all(
        "svg.plot",
        """els => els.map(svg => {
             const r = svg.getBoundingClientRect();
             const bars = [...svg.querySelectorAll('rect')].filter(b => {
               const q = b.getBoundingClientRect(); return q.width > 0 && q.height > 0; });
             return {label: svg.getAttribute('aria-label'), w: r.width, h: r.height,
                     bars: bars.length};
           })""")


def test_the_hook_detects_a_script_when_one_runs(browser, tmp_path) -> None:
    # Negative control: proves the checks below would notice a script if one ran.
    page_path = tmp_path / "bad.html"
    page_path.write_text("<html><body><script>window.__pwned='yes'; alert(1)</script>"
                         "<img src='http://example.invalid/x.png'></body></html>", "utf-8")
    page, dialogs, requests = _open(browser, page_path)
    assert page.evaluate("window.__pwned") == "yes"
    assert dialogs == ["1"] and requests


def test_plots_render_and_screenshot(browser, tmp_path) -> None:
    paths = write_reports(example_report(), tmp_path)
    page, dialogs, requests = _open(browser, paths["html"])
    plots = _plot_sizes(page)
    assert [p["label"] for p in plots] == [
        "Characters per row", "Tokens per row", "Rows per reason (colour: action)",
        "Invisible characters by code point", "Rows per label"]
    for p in plots:
        assert p["w"] > 100 and p["h"] > 50 and p["bars"] > 0, p
    assert page.inner_text(".banner").startswith("Gate FAILED")
    assert "Hello⟨U+200B⟩ world⟨U+FEFF⟩" in page.inner_text("table.examples")
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    assert dialogs == [] and requests == []


@pytest.mark.realdata
@pytest.mark.parametrize("bypass_csp", [False, True], ids=["with-csp", "escaping-alone"])
def test_blns_data_runs_no_script(browser, tmp_path, bypass_csp: bool) -> None:
    blns = json.loads(realdata("blns", "blns.json").read_text("utf-8"))
    report = hostile_report(PAYLOADS + blns)
    paths = write_reports(report, tmp_path)
    page, dialogs, requests = _open(browser, paths["html"], bypass_csp=bypass_csp)
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert dialogs == [] and requests == []
    assert page.eval_on_selector_all("script, iframe, object, embed, img", "e => e.length") == 0
    # the data is on the page as text, invisible characters made visible
    text = page.inner_text("body")
    assert "<script>window.__pwned = 'script';</script>" in text
    assert all(p["bars"] > 0 for p in _plot_sizes(page))
    page.screenshot(path=str(tmp_path / "blns.png"))  # viewport: the full page is ~10 MB
