"""Security: safe YAML, nothing evaluated, regexes on RE2 or rejected, data never picks a path."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from cleanpipe import Pipeline
from cleanpipe.spec import ConfigError, load_spec_text
from cleanpipe.stages.regex_filter import RegexFilter
from tests._robust_helpers import read_parts, report

PKG = Path(__file__).resolve().parent.parent / "cleanpipe"


def test_yaml_python_tags_are_refused(tmp_path):
    marker = tmp_path / "pwned"
    for tag in ("!!python/object/apply:os.system", "!!python/object/new:os.system"):
        text = f'name: x\ndescription: {tag} ["touch {marker}"]\nstages: []\n'
        with pytest.raises(ConfigError, match="not valid YAML"):
            load_spec_text(text, "evil.yaml")
    assert not marker.exists()


def test_no_unsafe_loading_or_eval_in_the_package():
    bad = re.compile(r"\byaml\.(load|unsafe_load|full_load)\(|\beval\(|\bexec\(|"
                     r"pickle\.loads?\(.*(config|record)|Loader=yaml\.(Full|Unsafe)?Loader\b")
    hits = [f"{p}:{i}" for p in PKG.rglob("*.py")
            for i, line in enumerate(p.read_text("utf-8").splitlines(), 1)
            if bad.search(line) and "SafeLoader" not in line]
    assert hits == []


def test_config_strings_are_data_not_code(tmp_path):
    marker = tmp_path / "pwned"
    payload = f"__import__('os').system('touch {marker}')"
    text = json.dumps({"name": payload, "stages": [
        {"stage": "regex_filter", "patterns": {"p": re.escape(payload)}}]})
    spec = load_spec_text(text)  # JSON is YAML: the strings stay strings
    assert spec.name == payload
    t = pa.table({"text": [payload, "fine"]})
    rep = Pipeline(spec=spec).run(t)
    assert rep["totals"]["kept"] == 1 and not marker.exists()


def test_catastrophic_pattern_runs_linear_on_re2():
    # (a+)+$ backtracks exponentially in Python's re on this input; RE2 is linear
    s = RegexFilter(patterns={"evil": r"(a+)+$"})
    res = s.transform(pa.array(["a" * 100_000 + "!", "aaa"]))
    assert [c.positions.tolist() for c in res.findings.chunks] == [[1]]


@pytest.mark.parametrize("pattern", [r"(a)\1", r"(?=a)", r"(?!a)", r"(?<=a)b", r"(?<!a)b"])
def test_patterns_re2_cannot_run_are_rejected(pattern):
    text = ("stages:\n  - stage: regex_filter\n    patterns:\n      ok: abc\n"
            f"      bad: '{pattern}'\n")
    with pytest.raises(ConfigError, match=r"p\.yaml:5: stages\[0\]\.patterns\.bad: .*RE2"):
        load_spec_text(text, "p.yaml")


def _all_files(root: Path) -> set[Path]:
    return {p.resolve() for p in root.rglob("*")}


@pytest.mark.parametrize("evil", ["../../escape", "/tmp/abs-escape", "..", "a/../../b",
                                  "CON", "x\x00y", "quarantine/../../z"])
def test_record_content_never_chooses_a_path(tmp_path, evil):
    work = tmp_path / "work"
    work.mkdir()
    src = work / "in.jsonl"
    src.write_text(json.dumps({"id": evil, "text": evil, "shard": evil}) + "\n"
                   + json.dumps({"id": "ok", "text": "drop me"}) + "\n")
    before = _all_files(tmp_path)
    out = work / "out"
    spec = {"input": {"id_field": "id"}, "stages": [
        {"stage": "regex_filter", "patterns": {"d": "^drop"}}]}
    rep = Pipeline.from_dict(spec).run(src, out)
    assert rep["totals"]["quarantined"] == 1
    created = _all_files(tmp_path) - before
    assert all(p == out.resolve() or out.resolve() in p.parents for p in created), created
    assert not Path("/tmp/abs-escape").exists()
    assert read_parts(out / "data").column("id").to_pylist() == [evil]
    assert read_parts(out / "quarantine").column("_cleanpipe_row_id").to_pylist() == ["ok"]


def test_reports_escape_record_content(tmp_path):
    nasty = '<script>alert(1)</script><img src=x onerror=alert(2)>"\'&'
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"text": nasty}) + "\n" + json.dumps({"text": "drop " + nasty})
                   + "\n")
    out = tmp_path / "out"
    Pipeline(stages=[RegexFilter(patterns={"d": "^drop"})]).run(src, out)
    rep = report(out)  # valid JSON whatever the data held
    assert rep["totals"]["quarantined"] == 1
    body = (out / "report.html").read_text("utf-8")
    assert "<script>alert(1)</script>" not in body
    assert "onerror=alert(2)>" not in body
