"""Shared test helpers: the real data of ../shared/data, and the CI policy on skips.

Real data: tests reach it through :func:`realdata` or the ``shared_data`` fixture and carry
the ``realdata`` marker (given automatically to every test whose fixtures include
``shared_data``; :func:`realdata` fails a test that lacks it). Outside CI a missing data
folder skips those tests; in CI (``CI=true``) it fails them, naming the folder.

Skips in CI: a test that skips in CI fails instead, unless ``tests/allowed_skips.txt`` lists
it with a reason; the session also fails if any skip off that list happened (doctests
included). Every run prints one line with the number of skips.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA_ENV = "CLEANPIPE_REALDATA"
DEFAULT_DATA = REPO.parent / "shared" / "data"
ALLOWED_SKIPS = Path(__file__).with_name("allowed_skips.txt")
MARKER = "realdata"

# The test being run and its phase ("setup", "call", "teardown"): realdata() checks the
# test's marker through it.
_current: tuple[pytest.Item, str] | None = None

# pytest loads this file as "conftest" and the tests import it as "tests.conftest": make
# both names one module, so that the hooks and realdata() share `_current`.
for _name in ("conftest", "tests.conftest"):
    sys.modules.setdefault(_name, sys.modules[__name__])


def in_ci() -> bool:
    """``CI`` is set to true (GitHub, GitLab and .ci/run set it)."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def realdata_root() -> Path | None:
    """The real-data folder (``$CLEANPIPE_REALDATA`` or ../shared/data), or None if absent."""
    root = data_root_setting()
    return root if root.is_dir() else None


def data_root_setting() -> Path:
    env = os.environ.get(DATA_ENV)
    return Path(env) if env else DEFAULT_DATA


def _missing(what: str) -> None:
    """Skip (or, in CI, fail) the test for a missing piece of real data."""
    if in_ci():
        pytest.fail(f"CI=true and {what}: the tests need the real data "
                    f"(provide {DEFAULT_DATA} or set {DATA_ENV} to its folder)", pytrace=False)
    pytest.skip(f"{what} (set {DATA_ENV} or provide ../shared/data)")


def _check_marker(what: str) -> None:
    if _current is None:
        raise RuntimeError(f"{what} is read outside a test: call realdata() inside a test "
                           "or a fixture, never at import time")
    item, phase = _current
    if item.get_closest_marker(MARKER) is None:
        pytest.fail(f"{item.nodeid} reads real data ({what}) without "
                    f"@pytest.mark.{MARKER}", pytrace=False)
    if phase == "setup" and "shared_data" not in item.fixturenames:
        # a fixture reading real data must request shared_data, so that every test using
        # it gets the marker, not only the first one (fixtures are cached)
        pytest.fail(f"a fixture of {item.nodeid} reads real data ({what}) without "
                    "requesting the shared_data fixture", pytrace=False)


def realdata(*parts: str) -> Path:
    """Path under the real-data folder, for a test marked ``realdata``.

    Skips the test when the data is absent (fails it in CI, naming the path).
    """
    what = "/".join(parts) or "the real-data folder"
    _check_marker(what)
    root = realdata_root()
    if root is None:
        _missing(f"real data not found at {data_root_setting()}")
    path = root.joinpath(*parts)
    if not path.exists():
        _missing(f"real data file missing: {path}")
    return path


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real-data folder; tests (and fixtures) using it get the ``realdata`` marker."""
    root = realdata_root()
    if root is None:
        _missing(f"real data not found at {data_root_setting()}")
    return root


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # tryfirst: before `-m` deselects by marker
    for item in items:
        if "shared_data" in getattr(item, "fixturenames", ()):
            item.add_marker(MARKER)


def _phase(item: pytest.Item, phase: str) -> None:
    global _current
    _current = (item, phase)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _phase(item, "setup")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    _phase(item, "call")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    _phase(item, "teardown")


# -- skips in CI ------------------------------------------------------------------------------

@dataclass(frozen=True)
class AllowedSkip:
    """One line of allowed_skips.txt: test ids (fnmatch pattern) that may skip, and why."""

    pattern: str
    reason: str


def load_allowed_skips(path: Path) -> list[AllowedSkip]:
    """Parse ``pattern | reason`` lines (``#`` comments, blank lines ignored).

        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "a.txt"
        >>> _ = p.write_text("# why each may skip\\ntests/t.py::test_a* | needs root\\n")
        >>> load_allowed_skips(p)
        [AllowedSkip(pattern='tests/t.py::test_a*', reason='needs root')]
    """
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        pattern, sep, reason = (s.strip() for s in line.partition("|"))
        if not sep or not pattern or not reason:
            raise ValueError(f"{path}:{n}: expected 'test id pattern | reason', got {line!r}")
        out.append(AllowedSkip(pattern, reason))
    return out


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--allowed-skips", default=str(ALLOWED_SKIPS),
                     help="file of the skips allowed in CI (pattern | reason per line)")


def _allowed_file(config: pytest.Config) -> str:
    """The allowed-skips file, relative to the repository when it lies inside."""
    path = Path(config.getoption("allowed_skips")).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _allowed(config: pytest.Config) -> list[AllowedSkip]:
    return load_allowed_skips(Path(config.getoption("allowed_skips")))


def allowed_reason(config: pytest.Config, nodeid: str) -> str | None:
    for entry in _allowed(config):
        if fnmatch.fnmatchcase(nodeid, entry.pattern):
            return entry.reason
    return None


def _skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _fail_skip_in_ci(config: pytest.Config, report: pytest.CollectReport | pytest.TestReport
                     ) -> None:
    if (in_ci() and report.skipped and not hasattr(report, "wasxfail")
            and allowed_reason(config, report.nodeid) is None):
        report.outcome = "failed"
        report.longrepr = (f"CI=true: {report.nodeid} would skip ({_skip_reason(report)}); "
                           f"in CI every test runs: install what it needs (.ci/run) or list "
                           f"it, with the reason, in {_allowed_file(config)}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    _fail_skip_in_ci(item.config, outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    outcome = yield
    _fail_skip_in_ci(collector.config, outcome.get_result())


def _skipped(config: pytest.Config) -> list[pytest.TestReport | pytest.CollectReport]:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    return list(reporter.stats.get("skipped", [])) if reporter is not None else []


def _unexpected_skips(config: pytest.Config) -> list[str]:
    return sorted({r.nodeid for r in _skipped(config)
                   if allowed_reason(config, r.nodeid) is None})


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    skipped = _skipped(config)
    unexpected = _unexpected_skips(config)
    allowed = sum(r.nodeid not in unexpected for r in skipped)
    terminalreporter.write_line(f"skips: {len(skipped)} ({allowed} on the allowed list "
                                f"{_allowed_file(config)})")
    if in_ci() and unexpected:
        terminalreporter.write_line("CI=true: skips not on the allowed list (the run fails):",
                                    red=True)
        for nodeid in unexpected:
            terminalreporter.write_line(f"  {nodeid}", red=True)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if in_ci() and _unexpected_skips(session.config) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# ---------------------------------------------------------------- headless Chromium
# The Debian ``chromium`` package (``.ci/run`` installs it) driven by the ``playwright``
# Python package; never ``playwright install`` (it downloads a browser).
CHROMIUM = os.environ.get("CLEANPIPE_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium per test module, for the report.html tests."""
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.skip(f"headless Chromium not found at {CHROMIUM} (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright not installed (pip install playwright)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()
