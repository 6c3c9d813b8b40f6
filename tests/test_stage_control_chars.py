"""control_chars: controls removed, line policies, surrogates repaired, U+FFFD flagged."""

from __future__ import annotations

import pyarrow as pa
import pytest

from cleanpipe.stages.control_chars import ControlChars
from tests._text_corpora import folder_strings
from tests.conftest import realdata


def test_codes_and_fixes() -> None:
    texts = ["n\x00ul", "bell\x07\x1b", "c1\x80\x9f", "nel\x85x", "a\r\nb", "a\rb",
             "l\u2028p\u2029", "bad\ufffd", "tab\tnl\n", None]
    res = ControlChars().transform(pa.array(texts))
    # CRLF is a consistent line break: flagged, kept (the old default rewrote it)
    assert res.texts.to_pylist() == ["nul", "bell", "c1", "nel\nx", "a\r\nb", "a\nb",
                                     "l\np\n", "bad\ufffd", "tab\tnl\n", None]
    assert res.findings.codes() == {"nul": 1, "c0_control": 1, "c1_control": 2, "crlf": 1,
                                    "cr": 1, "line_separator": 1, "replacement_char": 1}
    flagged = {c.code for c in res.findings.chunks if c.action.value == "flag"}
    assert flagged == {"crlf", "replacement_char"}
    fixed = ControlChars(actions={"crlf": "fix"}).transform(pa.array(texts))
    assert fixed.texts.to_pylist()[4] == "a\nb"


def test_a_kept_crlf_is_never_split_into_two_breaks() -> None:
    texts = ["a\r\nb\rc", "x\r\r\ny", "end\r", "\r\n"]
    assert ControlChars()(texts) == ["a\r\nb\nc", "x\n\r\ny", "end\n", "\r\n"]
    assert ControlChars(actions={"crlf": "fix"})(texts) == ["a\nb\nc", "x\n\ny", "end\n", "\n"]


def test_keep_policies() -> None:
    stage = ControlChars(line_endings="keep", unicode_line_breaks="keep")
    assert stage(["a\r\nb", "x\u2028y"]) == ["a\r\nb", "x\u2028y"]


def test_surrogates_in_bytes() -> None:
    # CESU-8 emoji (a surrogate pair) and a lone surrogate, as invalid UTF-8 inside a string.
    raw = pa.array([b"ok", b"emoji \xed\xa0\xbd\xed\xb8\x80!", b"lone \xed\xa0\x80"],
                   pa.binary())
    texts = raw.view(pa.string())
    res = ControlChars().transform(texts)
    assert res.texts.to_pylist() == ["ok", "emoji 😀!", "lone \ufffd"]
    assert res.findings.codes()["lone_surrogate"] == 2
    res.texts.validate(full=True)


@pytest.mark.realdata
def test_fewclue_line_separators() -> None:
    strings = folder_strings(realdata("cls_fewclue_tnews_iflytek_eprstmt"))
    with_ls = sum("\u2028" in s for s in strings)
    res = ControlChars().transform(pa.array(strings, pa.large_string()))
    assert with_ls > 0
    assert res.findings.codes().get("line_separator", 0) == with_ls
    assert not any("\u2028" in s for s in res.texts.to_pylist())


@pytest.mark.realdata
def test_medicalgpt_replacement_chars_flagged_not_changed() -> None:
    strings = folder_strings(realdata("sft_medicalgpt_zh"))
    n = sum("\ufffd" in s for s in strings)
    res = ControlChars(line_endings="keep").transform(pa.array(strings, pa.large_string()))
    assert n > 0 and res.findings.codes()["replacement_char"] == n
    assert sum("\ufffd" in s for s in res.texts.to_pylist()) == n
