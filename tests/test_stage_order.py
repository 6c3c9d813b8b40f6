"""Stage order is part of correctness: repair (unicode_fix) before removal.

A pipeline that lists a removal stage before ``unicode_fix`` is refused when it loads, with
one line naming both stages and the fix; every shipped pipeline repairs Chinese mojibake
(UTF-8 read as Windows-1252 or Latin-1, C1 controls included) back to the original text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cleanpipe.cli import PIPELINES_DIR, main, shipped_pipeline
from cleanpipe.contract.stage import TextStage
from cleanpipe.pipeline import Pipeline
from cleanpipe.spec import ConfigError
from cleanpipe.stage_order import ORDER_RULES
from cleanpipe.stages import ControlChars, InvisibleChars, UnicodeFix, Whitespace
from tests.conftest import realdata

SHIPPED = sorted(p.stem for p in PIPELINES_DIR.glob("*.yaml"))
#: bytes Windows-1252 leaves undefined: a "sloppy" decoder (ftfy's) keeps them as C1 controls
UNDEFINED_1252 = (0x81, 0x8D, 0x8F, 0x90, 0x9D)
C1 = {chr(c) for c in range(0x80, 0xA0)}


def sloppy_1252(text: str) -> str:
    """UTF-8 bytes read as Windows-1252, undefined bytes kept as C1 controls."""
    return "".join(chr(b) if b in UNDEFINED_1252 else bytes([b]).decode("cp1252")
                   for b in text.encode("utf-8"))


def latin1(text: str) -> str:
    return text.encode("utf-8").decode("latin-1")


# --- the rule is enforced when a pipeline loads --------------------------------------------


def _yaml(tmp_path: Path, stages: str) -> Path:
    p = tmp_path / "p.yaml"
    p.write_text(f"name: bad_order\nfields: [text]\nstages:\n{stages}", encoding="utf-8")
    return p


BAD = "  - stage: whitespace\n  - stage: control_chars\n  - stage: unicode_fix\n"


@pytest.mark.parametrize("command", ["validate", "run", "check"])
def test_removal_before_repair_is_refused_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "a"}\n', encoding="utf-8")
    out = tmp_path / "out"
    args = {"validate": [], "run": ["-i", str(src), "-o", str(out)],
            "check": ["-i", str(src)]}[command]
    assert main([command, str(_yaml(tmp_path, BAD)), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    # file:line of the first stage that runs too early, both stages, and the fix
    assert f"{tmp_path / 'p.yaml'}:4: stages[0]: whitespace runs before unicode_fix" in err
    assert err.endswith("did you mean: move unicode_fix before whitespace")
    assert not out.exists()


@pytest.mark.parametrize("rule", ORDER_RULES, ids=[r.then for r in ORDER_RULES])
def test_every_rule_refuses_its_pair_and_allows_the_right_order(tmp_path: Path, rule) -> None:
    with pytest.raises(ConfigError, match=f"move {rule.first} before {rule.then}"):
        Pipeline.from_dict({"stages": [{"stage": rule.then}, {"stage": rule.first}]})
    ok = Pipeline.from_dict({"stages": [{"stage": rule.first}, {"stage": rule.then}]})
    assert [s.name for s in ok.stages] == [rule.first, rule.then]


def test_stages_built_in_code_are_checked_too() -> None:
    with pytest.raises(ConfigError, match="control_chars runs before unicode_fix"):
        Pipeline(stages=[ControlChars(), UnicodeFix()], fields=["text"])
    with pytest.raises(ConfigError, match="invisible_chars runs before unicode_fix"):
        Pipeline(stages=[InvisibleChars(), {"stage": "unicode_fix"}])


def test_stages_on_disjoint_fields_may_come_in_any_order() -> None:
    pipe = Pipeline(stages=[ControlChars(fields=["a"]), UnicodeFix(fields=["b"])],
                    fields=["a", "b"])
    assert [s.name for s in pipe.stages] == ["control_chars", "unicode_fix"]
    with pytest.raises(ConfigError):
        Pipeline(stages=[Whitespace(fields=["a", "b"]), UnicodeFix(fields=["b"])])


def test_shipped_pipelines_repair_first() -> None:
    for name in SHIPPED:
        names = [s.name for s in shipped_pipeline(name).stages]
        text = [n for n in names if n in {"unicode_fix", "control_chars", "invisible_chars",
                                          "whitespace"}]
        assert text[0] == "unicode_fix", name


# --- end to end: Chinese mojibake comes out as the original --------------------------------


def _row(pipeline: str, instruction: str, text: str) -> dict[str, Any]:
    """One record of the data form ``pipeline`` reads, carrying ``text`` as the answer."""
    if pipeline in ("demo", "sft_alpaca"):
        return {"instruction": instruction, "input": "", "output": text, "score": 0.5}
    if pipeline == "sft_prompt_completion":
        return {"prompt": instruction, "completion": text}
    if pipeline == "sft_chat":
        return {"conversations": [{"from": "human", "value": instruction},
                                  {"from": "gpt", "value": text}]}
    if pipeline == "classification":
        return {"text": text, "label": "positive"}
    return {"text": text}


def _answer(pipeline: str, row: dict[str, Any]) -> str:
    if pipeline in ("demo", "sft_alpaca"):
        return row["output"]
    if pipeline == "sft_prompt_completion":
        return row["completion"]
    if pipeline == "sft_chat":
        return row["conversations"][1]["value"]
    return row["text"]


def _chinese_mojibake(per_encoding: int = 40) -> list[tuple[str, str, str]]:
    """(instruction, original answer, damaged answer): alpaca_zh answers ftfy can repair
    when it sees the raw damage, ``per_encoding`` for each of Windows-1252 and Latin-1,
    from distinct records, each damaged answer holding at least one C1 control. Short
    answers only, so the demo's 512-token window keeps every record."""
    records = json.loads(realdata("sft_llamafactory_demos", "alpaca_zh_demo.json").read_text(
        encoding="utf-8"))
    fix = UnicodeFix()
    picked: list[tuple[str, str, str]] = []
    counts = {sloppy_1252: 0, latin1: 0}
    for k, rec in enumerate(records):
        damage = (sloppy_1252, latin1)[k % 2]
        text = rec["output"]
        bad = damage(text)
        if (counts[damage] < per_encoding and len(text.encode("utf-8")) < 300
                and C1 & set(bad) and fix(bad) == text):
            counts[damage] += 1
            picked.append((rec["instruction"], text, bad))
    assert min(counts.values()) == per_encoding
    return picked


@pytest.mark.realdata
@pytest.mark.parametrize("name", [n for n in SHIPPED if any(
    isinstance(s, TextStage) for s in shipped_pipeline(n).stages)])
def test_shipped_pipeline_repairs_chinese_mojibake(name: str, tmp_path: Path) -> None:
    cases = _chinese_mojibake()
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(_row(name, ins, bad), ensure_ascii=False) + "\n"
                           for ins, _, bad in cases), encoding="utf-8")
    report = shipped_pipeline(name).run(str(src), tmp_path / "out", workers=1)
    assert report["totals"]["kept"] == report["totals"]["read"] == len(cases) >= 80
    out = pq.read_table(sorted((tmp_path / "out" / "data").glob("*.parquet"))).to_pylist()
    got = [_answer(name, r) for r in out]
    wrong = [(orig, g) for (_, orig, _), g in zip(cases, got, strict=True) if g != orig]
    assert not wrong, f"{len(wrong)} of {len(cases)} rows not repaired, e.g. {wrong[0]!r}"
    codes = {(r["stage"], r["code"]) for r in report["reasons"]}
    assert ("unicode_fix", "fix_encoding") in codes


# --- after unicode_fix, the removal stages still see (and name) what they are for -----------

AFTER_REPAIR = {
    ("control_chars", "nul"): "a\x00b", ("control_chars", "c0_control"): "a\x07b",
    ("control_chars", "c1_control"): "a\x9db",  # undefined in Windows-1252: ftfy keeps it
    ("control_chars", "crlf"): "a\r\nb", ("control_chars", "cr"): "a\rb",
    ("control_chars", "line_separator"): "a\u2028b",
    ("control_chars", "replacement_char"): "a\ufffdb",
    ("invisible_chars", "bom"): "\ufeffab", ("invisible_chars", "zero_width"): "a\u200bb",
    ("invisible_chars", "bidi_control"): "a\u202eb\u202c",
    ("invisible_chars", "soft_hyphen"): "a\u00adb", ("invisible_chars", "tag_char"): "a\U000e0068b",
    ("invisible_chars", "interlinear_annotation"): "a\ufff9b",
    ("invisible_chars", "invisible_operator"): "a\u2062b",
    ("invisible_chars", "deprecated_format"): "a\u206ab",
}


def test_removal_stages_after_repair_still_name_every_character() -> None:
    """With ftfy's defaults unicode_fix would remove NUL, C0, U+FEFF, U+206A.. and rewrite
    line breaks first, under its own two codes; its defaults leave them to the stages made
    for them, so each is reported under its own code (and actions set there apply)."""
    keys = list(AFTER_REPAIR)
    pipe = Pipeline(stages=[UnicodeFix(), ControlChars(), InvisibleChars()], fields=["text"])
    report = pipe.run(pa.table({"text": [AFTER_REPAIR[k] for k in keys]}), workers=1)
    found = {(r["stage"], r["code"]): r["rows"] for r in report["reasons"]}
    assert found == dict.fromkeys(keys, 1)
