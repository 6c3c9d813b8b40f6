"""Every shipped pipeline validates, and each one runs on a small fixture of its data form."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from cleanpipe.cli import PIPELINES_DIR, main, shipped_pipeline
from cleanpipe.pipeline import Pipeline

SHIPPED = sorted(p.stem for p in PIPELINES_DIR.glob("*.yaml"))


def test_the_ready_pipelines_are_shipped() -> None:
    assert {"demo", "sft_alpaca", "sft_chat", "classification", "pretrain_text",
            "sft_prompt_completion"} <= set(SHIPPED)
    # pipelines/ at the repository root is the same folder
    root = Path(__file__).resolve().parent.parent / "pipelines"
    if root.exists():
        assert root.resolve() == PIPELINES_DIR.resolve()


@pytest.mark.parametrize("name", SHIPPED)
def test_pipeline_validates(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(PIPELINES_DIR / f"{name}.yaml")]) == 0
    assert "ok" in capsys.readouterr().out


def _alpaca(i: int) -> dict:
    return {"instruction": f"Add {i} and {i * 7 + 3}.", "input": "",
            "output": f"{i} + {i * 7 + 3} = {i * 8 + 3}.", "score": 0.5 + i / 100}


def _sharegpt(i: int) -> dict:
    return {"conversations": [{"from": "human", "value": f"Square {i}?"},
                              {"from": "gpt", "value": f"{i} squared is {i * i}."}]}


def _openai(i: int) -> dict:
    return {"messages": [{"role": "user", "content": f"{i} 的立方是多少？"},
                         {"role": "assistant", "content": f"{i} 的立方是 {i ** 3}。"}]}


def _cls(i: int) -> dict:
    return {"text": f"review number {i}: it was {['fine', 'bad', 'so-so'][i % 3]} ({i * 13})",
            "label": ["positive", "negative", "neutral"][i % 3]}


def _prompt_completion(i: int) -> dict:
    return {"prompt": f"Question: what is {i} times 3?\nAnswer:", "completion": f" {i * 3}"}


def _text(i: int) -> dict:
    return {"text": f"Document {i}. The river number {i * 11} flows past town {i * 17}."}


FIXTURES = {"demo": [_alpaca], "sft_alpaca": [_alpaca], "sft_chat": [_sharegpt, _openai],
            "classification": [_cls], "pretrain_text": [_text],
            "sft_prompt_completion": [_prompt_completion]}
CASES = [(name, make) for name in SHIPPED for make in FIXTURES[name]]


@pytest.mark.parametrize(("name", "make"), CASES,
                         ids=[f"{n}-{m.__name__.strip('_')}" for n, m in CASES])
def test_pipeline_runs_on_a_fixture(name: str, make: Any, tmp_path: Path) -> None:
    """20 distinct records plus one exact copy of record 5: every shipped pipeline keeps the
    20 and quarantines the copy, and the output schema is the input schema."""
    rows = [make(i) for i in range(20)]
    rows.insert(12, dict(rows[5]))
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n",
                   encoding="utf-8")
    pipe = shipped_pipeline(name)
    report = pipe.run(str(src), tmp_path / "out", workers=1)
    t = report["totals"]
    assert (t["read"], t["kept"], t["quarantined"]) == (21, 20, 1)
    out = pq.read_table(sorted((tmp_path / "out" / "data").glob("*.parquet")))
    assert set(out.column_names) == set(rows[0]) | set(rows[1])
    q = pq.read_table(sorted((tmp_path / "out" / "quarantine").glob("*.parquet"))).to_pylist()
    assert [r["_cleanpipe_row_id"] for r in q] == ["in.jsonl:13"]


def test_shipped_pipeline_resolves_its_paths_from_any_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    pipe = shipped_pipeline("demo")
    paths = pipe.spec.input.path
    assert paths and all(Path(p).is_file() for p in paths)
    # loaded plainly, the same file's relative paths would not resolve from here
    plain = Pipeline.from_yaml(PIPELINES_DIR / "demo.yaml").spec.input.path
    assert not all(Path(p).is_file() for p in plain)


def test_readme_standalone_examples() -> None:
    """The standalone-use examples of README.md, as written there."""
    import datasets
    import polars as pl

    from cleanpipe.stages import ControlChars, InvisibleChars

    strip = InvisibleChars()
    assert strip("zero\u200bwidth") == "zerowidth"
    assert strip(["a\u200bb", None]) == ["ab", None]
    out = strip(pl.Series(["x\u00ady"]))
    assert isinstance(out, pl.Series) and out.to_list() == ["xy"]
    ds = datasets.Dataset.from_dict({"text": ["a\x00b", "c\rd"], "n": [1, 2]})
    ds = ds.map(ControlChars(), batched=True)
    assert ds["text"][:] == ["ab", "c\nd"] and ds["n"][:] == [1, 2]
