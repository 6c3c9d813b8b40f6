"""unicode_fix: output identical to ftfy.fix_text with the same config; fast path; codes."""

from __future__ import annotations

import json

import ftfy
import pyarrow as pa
import pytest

from cleanpipe.stages.unicode_fix import UnicodeFix
from cleanpipe.text.ftfy_safe import needs_ftfy_regex, normalization_unsafe
from tests._text_corpora import folder_strings, strings_in
from tests.conftest import realdata

CONFIGS = {
    "cleanpipe_default": {},
    "ftfy_default": {"fix_character_width": True, "uncurl_quotes": True,
                     "fix_line_breaks": True, "remove_control_chars": True},
    "nfkc_no_html": {"normalization": "NFKC", "unescape_html": False},
}


def assert_exact(strings: list[str], **params) -> None:
    stage = UnicodeFix(**params)
    stage.setup()
    config = stage.ftfy_config()
    got = stage.transform(pa.array(strings, pa.large_string())).texts.to_pylist()
    bad = [(s, g) for s, g in zip(strings, got, strict=True) if g != ftfy.fix_text(s, config)]
    assert not bad, f"{len(bad)} strings differ from ftfy.fix_text, e.g. {bad[:2]!r}"


def test_fixture_exact_and_explained() -> None:
    texts = ["plain ascii", "caf&eacute; &amp; co", "sÃ³lo", "a\r\nb\rc", "ﬁne",
             "\x1b[31mred\x1b[0m", "“中文”，（全角）", None, "", "e\u0301"]
    # line breaks are control_chars' business by default (it runs after this stage)
    assert UnicodeFix()(texts[3]) == texts[3]
    stage = UnicodeFix(fix_line_breaks=True)
    res = stage.transform(pa.array(texts, pa.large_string()))
    out = res.texts.to_pylist()
    cfg = stage.ftfy_config()
    assert out == [None if t is None else ftfy.fix_text(t, cfg) for t in texts]
    assert out[6] == texts[6]  # Chinese punctuation and quotes left alone by default
    codes = res.findings.codes()
    assert codes["unescape_html"] == 1 and codes["fix_encoding"] == 1
    assert codes["fix_line_breaks"] == 1 and codes["fix_latin_ligatures"] == 1
    assert codes["remove_terminal_escapes"] == 1 and codes["normalization"] == 1
    chunk = next(c for c in res.findings.chunks if c.code == "fix_encoding")
    assert chunk.positions.tolist() == [2] and "utf-8" in chunk.detail[0]
    assert chunk.before[0] == "sÃ³lo" and chunk.after[0] == "sólo"
    assert res.metrics["ftfy_strings"] < len(texts) - 1


def test_repeats_ftfy_where_its_own_output_is_not_stable() -> None:
    # ftfy works per line: fixing the CR makes a new line without the "<" that switched
    # entity decoding off, so a second fix_text would decode "&ap;". One stage pass does both.
    text = "&ap;\r<|endoftext|>"
    stage = UnicodeFix(fix_line_breaks=True)
    cfg = stage.ftfy_config()
    once = ftfy.fix_text(text, cfg)
    assert once == "&ap;\n<|endoftext|>" and ftfy.fix_text(once, cfg) == "≈\n<|endoftext|>"
    res = stage.transform(pa.array([text, "a\rb"], pa.large_string()))
    assert res.texts.to_pylist() == ["≈\n<|endoftext|>", "a\nb"]
    assert res.findings.codes() == {"fix_line_breaks": 2, "unescape_html": 1}
    again = stage.transform(res.texts)
    assert again.texts.to_pylist() == res.texts.to_pylist() and not again.findings.codes()


def test_ftfy_defaults_change_chinese_punctuation() -> None:
    assert UnicodeFix(fix_character_width=True, uncurl_quotes=True)("“你好”，世界") == '"你好",世界'


def test_flag_action_keeps_text() -> None:
    stage = UnicodeFix(actions={"fix_encoding": "flag"})
    res = stage.transform(pa.array(["sÃ³lo", "caf&eacute;"]))
    assert res.texts.to_pylist() == ["sÃ³lo", "café"]
    assert res.findings.codes() == {"fix_encoding": 1, "unescape_html": 1}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_fast_path_never_skips_a_string_ftfy_changes(name: str) -> None:
    # Each code point ftfy may touch must be caught by the proof, alone and in context.
    stage = UnicodeFix(**CONFIGS[name])
    config = stage.ftfy_config()
    import pyarrow.compute as pc
    probe = [chr(cp) for cp in range(0x20, 0x3000)] + ["a" + chr(cp) + "b" for cp in
                                                      range(0xFE00, 0x10000)
                                                      if not 0xD800 <= cp < 0xE000]
    arr = pa.array(probe, pa.large_string())
    skipped = ~pc.match_substring_regex(arr, needs_ftfy_regex(config)).to_numpy(
        zero_copy_only=False)
    wrong = [s for s, sk in zip(probe, skipped, strict=True)
             if sk and ftfy.fix_text(s, config) != s]
    assert not wrong, wrong[:5]


def test_normalization_inert_set_is_closed_under_concatenation() -> None:
    import unicodedata
    unsafe = normalization_unsafe("NFC")
    assert 0x0301 in unsafe and 0x1161 in unsafe and ord("é") not in unsafe
    assert unicodedata.normalize("NFC", "é\u00e8中ض") == "é\u00e8中ض"


@pytest.mark.realdata
def test_ftfy_testcases_exact() -> None:
    folder = realdata("ftfy_testcases")
    strings = [folder.joinpath("face.txt").read_text(encoding="utf-8")]
    for f in sorted(folder.glob("*.json")):
        for case in json.loads(f.read_text(encoding="utf-8")):
            strings.extend(strings_in(case))
    for params in CONFIGS.values():
        assert_exact(strings, **params)


@pytest.mark.realdata
@pytest.mark.parametrize("folder", ["sft_llamafactory_demos", "sft_medicalgpt_zh"])
def test_sft_sets_exact(folder: str) -> None:
    strings = folder_strings(realdata(folder))
    assert len(strings) > 1000
    assert_exact(strings)


@pytest.mark.realdata
def test_tldr_subset_exact() -> None:
    path = realdata("corpus_tldr_pages", "tldr_pages.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()[::5]
    assert_exact([s for line in lines for s in strings_in(json.loads(line))])


@pytest.mark.realdata
def test_t0_subset_exact() -> None:
    strings = folder_strings(realdata("sft_self_instruct_t0_50k", "data_per_template"), every=12)
    assert len(strings) > 5000
    assert_exact(strings)


@pytest.mark.realdata
@pytest.mark.slow
def test_full_corpora_exact() -> None:
    path = realdata("corpus_tldr_pages", "tldr_pages.jsonl")
    assert_exact(folder_strings(path.parent, suffixes=(".jsonl",)))
    t0 = folder_strings(realdata("sft_self_instruct_t0_50k", "data_per_template"))
    assert len(t0) == 2 * 55185
    assert_exact(t0)
    assert_exact(t0, fix_character_width=True, uncurl_quotes=True)
    for folder in ("sft_llamafactory_demos", "sft_medicalgpt_zh"):
        assert_exact(folder_strings(realdata(folder)), fix_character_width=True,
                     uncurl_quotes=True)


@pytest.mark.realdata
def test_alpaca_zh_default_untouched_but_ftfy_defaults_rewrite() -> None:
    records = json.loads(realdata("sft_llamafactory_demos", "alpaca_zh_demo.json").read_text(
        encoding="utf-8"))
    ftfy_cfg = ftfy.TextFixerConfig()
    ftfy_changed = sum(any(ftfy.fix_text(s, ftfy_cfg) != s for s in strings_in(r))
                       for r in records)
    stage = UnicodeFix()
    ours_changed = sum(any(stage(s) != s for s in strings_in(r)) for r in records)
    assert ftfy_changed == 962
    assert ours_changed < 20


@pytest.mark.parametrize("form", ["NFC", "NFD", "NFKC", "NFKD"])
def test_shipped_normalization_table_is_the_computed_one(form: str) -> None:
    """The table read instead of walking every code point holds this Python's Unicode
    version and equals the walk, form by form."""
    import unicodedata

    from cleanpipe.text import ftfy_safe

    shipped = json.loads(ftfy_safe.NORMALIZATION_TABLE.read_text(encoding="utf-8"))
    ranges = shipped[f"{unicodedata.unidata_version}/{form}"]
    assert normalization_unsafe(form) == frozenset(
        cp for lo, hi in ranges for cp in range(lo, hi + 1))
    assert normalization_unsafe(form) == ftfy_safe.computed_normalization_unsafe(form)


def test_ftfy_sees_only_the_segments_it_could_change(monkeypatch: pytest.MonkeyPatch) -> None:
    # Line segments without anything ftfy acts on are kept without asking ftfy, and the
    # result is still fix_text's: a clean "<" line still switches entity decoding off for
    # the lines after it (auto), mojibake on a later line is still fixed, and a line longer
    # than max_decode_length is cut where fix_text cuts it.
    import ftfy

    from cleanpipe.stages import unicode_fix as uf

    texts = ["plain line\n<b>bold</b> line\ncaf&eacute; stays\nthe cafÃ© line\n",
             "caf&eacute;\nclean one\nclean two\n" + "x" * 30 + "Ã©" + "y" * 30,
             "no break but doesnÃ¢â‚¬â„¢t"]
    stage = UnicodeFix(max_decode_length=25)
    config = stage.ftfy_config()
    expected = [ftfy.fix_text(t, config) for t in texts]
    asked: list[str] = []
    real = ftfy.fix_and_explain

    def recording(text: str, config: ftfy.TextFixerConfig) -> tuple[str, object]:
        asked.append(text)
        return real(text, config)

    monkeypatch.setattr(uf.ftfy, "fix_and_explain", recording)
    assert stage(texts) == expected
    assert "plain line\n" not in asked and "clean one\n" not in asked
    assert "the cafÃ© line\n" in asked and "caf&eacute;\n" in asked


def test_line_breaks_of_a_string_longer_than_max_decode_length_as_ftfy_makes_them() -> None:
    # ftfy cuts a line longer than max_decode_length, possibly between CR and LF, and then
    # makes two line breaks of them: the bulk CRLF shortcut must leave such strings to it.
    stage = UnicodeFix(max_decode_length=7, fix_line_breaks=True)
    texts = ["abcdef\r\nx", "ab\r\ncd\r\n", "abcdefghijkl\rm"]
    assert stage(texts) == [ftfy.fix_text(t, stage.ftfy_config()) for t in texts]
