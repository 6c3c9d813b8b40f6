"""whitespace: unusual spaces, trailing spaces, runs, blank lines, trimming; U+3000 kept."""

from __future__ import annotations

import pyarrow as pa

from cleanpipe.stages.whitespace import Whitespace


def test_defaults() -> None:
    texts = ["a\u00a0b\u2009c", "x  \ny\t\n", "  indent\n    code  here", "p\n\n\n\nq",
             "中\u3000文", None, ""]
    res = Whitespace().transform(pa.array(texts))
    assert res.texts.to_pylist() == ["a b c", "x\ny", "indent\n    code  here",
                                     "p\n\n\n\nq", "中\u3000文", None, ""]
    codes = res.findings.codes()
    assert codes["unusual_space"] == 1 and codes["trailing_space"] == 1
    assert codes["space_run"] == 1 and codes["blank_lines"] == 1
    assert codes["edge_whitespace"] == 2
    assert res.metrics["codepoints"] == {"U+00A0": 1, "U+2009": 1}


def test_fix_runs_and_blank_lines_keeps_indentation() -> None:
    stage = Whitespace(actions={"space_run": "fix", "blank_lines": "fix"})
    assert stage("def f():\n    return  1\n\n\n\nx") == "def f():\n    return 1\n\nx"


def test_ideographic_space_optional() -> None:
    assert Whitespace(keep_ideographic_space=False)("中\u3000文") == "中 文"
