"""Defaults change only what harms training: clean prompt/completion rows pass the shipped
pipelines as the trainer would see them, edge whitespace included.

TRL joins prompt and completion as they are (``"The sky is" + " blue."``), and every T0
prompt ends in ``\\n``: trimming either changes the example. T0 completions end in a literal
``<|endoftext|>``, which ``special_tokens`` strips on purpose (it would be read as the end of
the text in the middle of the sequence); everything else must come out byte for byte.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cleanpipe.cli import PIPELINES_DIR, main, shipped_pipeline
from cleanpipe.contract.stage import TextStage
from cleanpipe.pipeline import Pipeline
from tests.conftest import realdata

SHIPPED = sorted(p.stem for p in PIPELINES_DIR.glob("*.yaml"))
TRL_EXAMPLE = {"prompt": "The sky is", "completion": " blue."}
EOT = "<|endoftext|>"
#: PROVENANCE.md columns that count damaged records: a shard with 0 in each is clean
_CLEAN_COLUMNS = ("zero-width recs", "control-char recs", "mojibake-like recs", "U+FFFD recs")


def _clean_t0_shards() -> list[Path]:
    """T0 shards whose PROVENANCE.md row counts no damaged record (and that have rows)."""
    folder = realdata("sft_self_instruct_t0_50k")
    lines = (folder / "PROVENANCE.md").read_text(encoding="utf-8").splitlines()
    header = next(x for x in lines if x.startswith("| file |"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    shards = []
    for line in lines:
        if not line.startswith("| data_per_template/"):
            continue
        row = dict(zip(cols, (c.strip() for c in line.strip("|").split("|")), strict=True))
        if int(row["records"]) and all(row[c] == "0" for c in _CLEAN_COLUMNS):
            shards.append(folder / row["file"])
    return shards


#: an HTML character reference: damage unicode_fix repairs on purpose (``&#x27;`` for ``'``)
_ENTITY = re.compile(r"&(#x?[0-9a-fA-F]+|[a-zA-Z]+);")


def _t0_rows(every: int = 6, per_shard: int = 10) -> list[dict[str, str]]:
    """Rows of every ``every``-th clean shard, without the few holding an HTML entity."""
    rows = []
    for shard in _clean_t0_shards()[::every]:
        with shard.open(encoding="utf-8") as f:
            rows += [json.loads(line) for line in itertools.islice(f, per_shard)]
    return [r for r in rows if not _ENTITY.search(r["prompt"] + r["completion"])]


def _expected(row: dict[str, str], strips_special_tokens: bool) -> dict[str, str]:
    if strips_special_tokens:
        return {**row, "completion": row["completion"].removesuffix(EOT)}
    return row


def _text_stages(name: str) -> list[TextStage]:
    return [s for s in shipped_pipeline(name).stages if isinstance(s, TextStage)]


def _run_prompt_completion(tmp_path: Path, rows: list[dict[str, Any]]) -> tuple[int, Path]:
    """`cleanpipe run` with the shipped prompt/completion pipeline: exit code, output."""
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                   encoding="utf-8")
    out = tmp_path / "out"
    code = main(["run", str(PIPELINES_DIR / "sft_prompt_completion.yaml"), "-i", str(src),
                 "-o", str(out), "-q", "--workers", "1"])
    return code, out


def _kept(out: Path) -> list[dict[str, Any]]:
    return pq.read_table(sorted((out / "data").glob("*.parquet"))).to_pylist()


def test_trl_example_passes_the_prompt_completion_pipeline_unchanged(tmp_path: Path) -> None:
    code, out = _run_prompt_completion(tmp_path, [TRL_EXAMPLE])
    assert code == 0 and _kept(out) == [TRL_EXAMPLE]


@pytest.mark.parametrize("name", [n for n in SHIPPED if _text_stages(n)])
def test_trl_example_passes_every_shipped_text_stage_unchanged(name: str) -> None:
    pipe = Pipeline(stages=_text_stages(name), fields=["prompt", "completion"])
    out = pa.Table.from_batches(list(pipe.iter_batches(pa.Table.from_pylist([TRL_EXAMPLE]))))
    assert out.to_pylist() == [TRL_EXAMPLE]


@pytest.mark.realdata
def test_t0_rows_pass_the_prompt_completion_pipeline_unchanged(tmp_path: Path) -> None:
    """End to end: every row the pipeline keeps is the row as read (the ``id`` column
    says which); the rows it drops go for what the trainer cannot use (too long, no
    trainable token once the end-of-text is gone, duplicates), never for their text."""
    rows = [{"id": i, **r} for i, r in enumerate(_t0_rows())]
    assert len(rows) >= 250
    assert all(r["prompt"].endswith("\n") for r in rows)  # what whitespace used to trim
    _, out = _run_prompt_completion(tmp_path, rows)
    kept = _kept(out)
    assert len(kept) >= 200
    changed = [(rows[o["id"]], o) for o in kept if _expected(rows[o["id"]], True) != o]
    assert not changed, f"{len(changed)} of {len(kept)} rows changed, e.g. {changed[0]!r}"
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    text_stages = {s.name for s in _text_stages("sft_prompt_completion")}
    assert not [r for r in report["reasons"] if r["stage"] in text_stages
                and r["action"] == "drop"]


@pytest.mark.realdata
@pytest.mark.parametrize("name", [n for n in SHIPPED if _text_stages(n)])
def test_t0_rows_pass_every_shipped_text_stage_unchanged(name: str) -> None:
    """The text stages each shipped pipeline runs, as it configures them, on T0's two
    fields: a prompt changes nowhere; a completion only loses its literal end-of-text."""
    stages = _text_stages(name)
    rows = _t0_rows()
    pipe = Pipeline(stages=stages, fields=["prompt", "completion"])
    out = pa.Table.from_batches(list(pipe.iter_batches(pa.Table.from_pylist(rows)))).to_pylist()
    strips = any(s.name == "special_tokens" for s in stages)
    changed = [(r, o) for r, o in zip(rows, out, strict=True) if _expected(r, strips) != o]
    assert not changed, f"{len(changed)} of {len(rows)} rows changed, e.g. {changed[0]!r}"


@pytest.mark.realdata
def test_clean_alpaca_rows_pass_the_alpaca_text_stages_unchanged() -> None:
    """Trailing spaces before a newline (markdown line breaks) are common in alpaca answers;
    the defaults used to remove them."""
    records = json.loads(realdata("sft_llamafactory_demos", "alpaca_en_demo.json").read_text(
        encoding="utf-8"))
    assert sum(bool(re.search(r"[ \t]\n", r["output"])) for r in records) > 50
    pipe = Pipeline(stages=_text_stages("sft_alpaca"), fields=["instruction", "input", "output"])
    out = pa.Table.from_batches(list(pipe.iter_batches(pa.Table.from_pylist(records))))
    assert out.to_pylist() == records
