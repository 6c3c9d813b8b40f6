"""The CI policy of tests/conftest.py, run on small test files in a pytest subprocess: with
CI=true a missing data folder or any skip off tests/allowed_skips.txt fails; a test reading
real data without the realdata marker fails everywhere."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import ALLOWED_SKIPS, load_allowed_skips

REPO = Path(__file__).resolve().parent.parent

CASES = '''
import pytest
from tests.conftest import realdata


def test_passes():
    pass


def test_allowed_skip():
    pytest.skip("needs root")


def test_unlisted_skip():
    pytest.skip("no chromium here")


@pytest.mark.realdata
def test_marked_reads_real_data():
    realdata("blns", "blns.json")


def test_unmarked_reads_real_data():
    realdata("blns", "blns.json")


def test_shared_data_fixture_marks_the_test(shared_data, request):
    assert request.node.get_closest_marker("realdata") is not None


@pytest.fixture
def reads_without_shared_data():
    return realdata("blns")


@pytest.mark.realdata
def test_fixture_must_request_shared_data(reads_without_shared_data):
    pass
'''

IMPORT_SKIP = '''
import pytest

pytest.importorskip("no_such_module_for_cleanpipe_tests")


def test_never_collected():
    pass
'''


def _pytest(args: list[str], ci: bool, data: str, cwd: Path) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env.update(PYTHONPATH=str(REPO), CLEANPIPE_REALDATA=data)
    if ci:
        env["CI"] = "true"
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                       cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout + r.stderr


def _outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """``{test name: (outcome, text)}`` from a JUnit file (collection errors by file)."""
    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome, text = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome, text = tag, f"{el.get('message', '')} {el.text or ''}"
        out[case.get("name") or case.get("classname", "")] = (outcome, text)
    return out


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("policy")
    (d / "test_cases.py").write_text(CASES, encoding="utf-8")
    (d / "test_import_skip.py").write_text(IMPORT_SKIP, encoding="utf-8")
    (d / "allowed.txt").write_text("# test\n*::test_allowed_skip | the case under test\n")
    (d / "pytest.ini").write_text("[pytest]\nmarkers =\n    realdata: reads real data\n")
    return d


def _run_cases(d: Path, ci: bool, name: str = "test_cases.py"
               ) -> tuple[int, str, dict[str, tuple[str, str]]]:
    junit = d / f"junit-{name}-{ci}.xml"
    code, out = _pytest(["-p", "tests.conftest", "-c", str(d / "pytest.ini"), "--rootdir",
                         str(d), "--allowed-skips", str(d / "allowed.txt"),
                         f"--junitxml={junit}", str(d / name)], ci, str(d / "no-data-here"), d)
    return code, out, _outcomes(junit)


@pytest.fixture(scope="module")
def case_runs(cases: Path) -> dict[bool, tuple[int, str, dict[str, tuple[str, str]]]]:
    """test_cases.py run with and without CI=true."""
    return {ci: _run_cases(cases, ci=ci) for ci in (True, False)}


def test_ci_fails_every_skip_off_the_list(cases: Path, case_runs) -> None:
    code, out, got = case_runs[True]
    assert code == 1, out
    assert got["test_passes"][0] == "passed"
    assert got["test_allowed_skip"][0] == "skipped"
    outcome, text = got["test_unlisted_skip"]
    assert outcome == "failure" and "would skip (no chromium here)" in text
    assert "allowed.txt" in text
    # a missing data folder fails, naming it and the variable that sets it
    for name in ("test_marked_reads_real_data", "test_shared_data_fixture_marks_the_test"):
        outcome, text = got[name]
        assert outcome in ("failure", "error"), (name, got[name])
        assert str(cases / "no-data-here") in text and "CLEANPIPE_REALDATA" in text
    assert "skips: 1 (1 on the allowed list" in out


def test_outside_ci_the_same_cases_skip(case_runs) -> None:
    code, out, got = case_runs[False]
    assert code == 1, out  # the unmarked real-data reads fail everywhere (below)
    for name in ("test_allowed_skip", "test_unlisted_skip", "test_marked_reads_real_data",
                 "test_shared_data_fixture_marks_the_test"):
        assert got[name][0] == "skipped", (name, got[name])
    assert "skips: 4 (1 on the allowed list" in out


@pytest.mark.parametrize("ci", [True, False])
def test_a_module_skipped_at_import(cases: Path, ci: bool) -> None:
    code, out, _ = _run_cases(cases, ci=ci, name="test_import_skip.py")
    if ci:  # a collection error: the run stops there, naming the missing module
        assert code == 2 and "would skip (could not import 'no_such_module_for_cleanpipe" in out
    else:
        assert code == pytest.ExitCode.NO_TESTS_COLLECTED and "1 skipped" in out, out


@pytest.mark.parametrize("ci", [True, False])
def test_real_data_read_needs_the_marker(case_runs, ci: bool) -> None:
    _, _, got = case_runs[ci]
    outcome, text = got["test_unmarked_reads_real_data"]
    assert outcome == "failure" and "without @pytest.mark.realdata" in text
    outcome, text = got["test_fixture_must_request_shared_data"]
    assert outcome == "error" and "without requesting the shared_data fixture" in text


def test_ci_run_of_a_real_test_fails_naming_the_missing_data(tmp_path) -> None:
    """The acceptance check: the repository's own real-data test, its data folder gone."""
    missing = tmp_path / "renamed-away"
    test = "tests/test_stage_invisible_chars.py::test_t0_zero_width_rows_cleaned"
    code, out = _pytest(["-q", test], ci=True, data=str(missing), cwd=REPO)
    assert code == 1, out
    assert f"real data not found at {missing}" in out and "CLEANPIPE_REALDATA" in out
    code, out = _pytest(["-q", test], ci=False, data=str(missing), cwd=REPO)
    assert code == 0 and "1 skipped" in out, out


def test_allowed_skips_file_gives_a_reason_for_each_entry() -> None:
    entries = load_allowed_skips(ALLOWED_SKIPS)
    assert entries and all(len(e.reason) > 20 for e in entries)
    for e in entries:  # each names tests that exist
        path = REPO / e.pattern.split("::")[0]
        assert path.is_file(), e.pattern
        assert e.pattern.split("::")[1].rstrip("*") in path.read_text("utf-8"), e.pattern
