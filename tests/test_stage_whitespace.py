"""whitespace: unusual spaces, trailing spaces, runs, blank lines, trimming; U+3000 kept."""

from __future__ import annotations

import pyarrow as pa

from cleanpipe.stages.whitespace import Whitespace

TEXTS = ["a\u00a0b\u2009c", "x  \ny\t\n", "  indent\n    code  here", "p\n\n\n\nq",
         "中\u3000文", None, ""]


def test_defaults_only_flag() -> None:
    """Every whitespace code is cosmetic: by default it is found and counted, nothing
    changes (the cosmetic rewrite the old defaults did is tested below, on request)."""
    res = Whitespace().transform(pa.array(TEXTS))
    assert res.texts.to_pylist() == TEXTS
    codes = res.findings.codes()
    assert codes["unusual_space"] == 1 and codes["trailing_space"] == 1
    assert codes["space_run"] == 1 and codes["blank_lines"] == 1
    assert codes["edge_whitespace"] == 2
    assert {c.action.value for c in res.findings.chunks} == {"flag"}
    assert res.metrics["codepoints"] == {"U+00A0": 1, "U+2009": 1}


def test_fix_on_request() -> None:
    stage = Whitespace(actions={"unusual_space": "fix", "trailing_space": "fix",
                                "edge_whitespace": "fix"})
    res = stage.transform(pa.array(TEXTS))
    assert res.texts.to_pylist() == ["a b c", "x\ny", "indent\n    code  here",
                                     "p\n\n\n\nq", "中\u3000文", None, ""]


def test_prompt_completion_edges_kept() -> None:
    """TRL's own example: trimming the completion would teach "The sky isblue."."""
    row = {"prompt": ["The sky is", "Translate:\n"], "completion": [" blue.", " Bonjour\n"]}
    assert Whitespace()(row) == row


def test_fix_runs_and_blank_lines_keeps_indentation() -> None:
    stage = Whitespace(actions={"space_run": "fix", "blank_lines": "fix"})
    assert stage("def f():\n    return  1\n\n\n\nx") == "def f():\n    return 1\n\nx"


def test_ideographic_space_optional() -> None:
    fix = {"unusual_space": "fix"}
    assert Whitespace(actions=fix)("中\u3000文") == "中\u3000文"
    assert Whitespace(keep_ideographic_space=False, actions=fix)("中\u3000文") == "中 文"
