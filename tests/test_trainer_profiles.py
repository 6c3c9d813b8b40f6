"""Trainer profiles against the trainers themselves.

On 300 real records each of alpaca_en, MedicalGPT and a ShareGPT set, with the Qwen3 tokenizer
and lengths 256 and 1024, the ``trl`` and ``llamafactory`` profiles must give, row by row, the
token count and supervised-token count that TRL's ``SFTTrainer`` dataset preparation and
LLaMA-Factory's supervised processor give; rows cleanpipe keeps must have at least one
supervised token in that trainer. TRL runs in-process (extra ``trainers``); LLaMA-Factory in
its own environment (``make .venv-llamafactory``), through tests/trainer_refs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import in_ci, realdata

from cleanpipe.contract.stage import Action
from cleanpipe.stages.trainable_tokens import TrainableTokens
from cleanpipe.templating import ALPACA_INPUT, ALPACA_NO_INPUT

pytestmark = pytest.mark.realdata

REPO = Path(__file__).resolve().parent.parent
LF_PYTHON = REPO / ".venv-llamafactory" / "bin" / "python"
LF_SCRIPT = REPO / "tests" / "trainer_refs" / "llamafactory_reference.py"
N = 300
LENGTHS = (256, 1024)
ROLES = {"human": "user", "gpt": "assistant", "system": "system"}


def _read(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".json":
        rows = json.loads(path.read_text("utf-8"))[:N]
    else:
        with path.open(encoding="utf-8") as f:
            rows = [json.loads(line) for _, line in zip(range(N), f, strict=False)]
    return [{"row_id": f"{path.name}:{i}", **r} for i, r in enumerate(rows)]


@pytest.fixture
def sets(shared_data: Path) -> dict[str, list[dict[str, Any]]]:
    return {
        "alpaca_en": _read(shared_data / "sft_llamafactory_demos" / "alpaca_en_demo.json"),
        "medical": _read(shared_data / "sft_medicalgpt_zh" / "medical_sft_1K_format.jsonl"),
        "sharegpt": _read(shared_data / "sft_medicalgpt_zh" / "sharegpt_zh_1K_format.jsonl"),
    }


def _openai(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same conversations in OpenAI ``messages`` form."""
    return [{"row_id": r["row_id"], "messages": [
        {"role": ROLES[m["from"]], "content": m["value"]} for m in r["conversations"]]}
        for r in rows]


def _tokenizer() -> str:
    return str(realdata("tokenizers", "qwen3"))


def _cleanpipe(rows: list[dict[str, Any]], trainer: dict[str, Any], lengths: tuple[int, ...],
               **params: Any) -> dict[int, tuple[dict[str, tuple[int, int]], set[str]]]:
    """Per length: {row id: (tokens as trained, supervised tokens)} for the rows the trainer
    takes, and the row ids the ``trainable_tokens`` stage keeps."""
    first = TrainableTokens(tokenizer=_tokenizer(), trainer=trainer, **params)
    batch = pa.RecordBatch.from_pylist(rows)
    ids = [r["row_id"] for r in rows]
    out = {}
    for length in lengths:
        # one tokenizer load for all lengths: the copy keeps the loaded tokenizer
        stage = first.model_copy(update={"trainer": first.profile.with_length(length)})
        trained = stage.trained(batch)
        counts = {rid: (len(trained.ids[i]), int(trained.supervised[i]))
                  for i, rid in enumerate(ids) if not trained.skipped[i]}
        dropped = set(stage.judge(trained).findings.positions(Action.DROP).tolist())
        out[length] = counts, {rid for i, rid in enumerate(ids) if i not in dropped}
    return out


def _compare(name: str, ours: dict[str, tuple[int, int]], kept: set[str],
             theirs: dict[str, tuple[int, int]], n_rows: int, trained: bool = True) -> None:
    """Row by row; ``trained``: the trainer keeps most rows (else: it keeps none)."""
    if trained:
        assert len(theirs) > n_rows // 2, f"{name}: the trainer kept only {len(theirs)} rows"
    else:
        assert not theirs and not kept, f"{name}: {len(theirs)} trained, {len(kept)} kept"
    mismatched = [f"{rid}: cleanpipe {ours.get(rid)} != trainer {tuple(theirs[rid])}"
                  for rid in theirs if ours.get(rid) != tuple(theirs[rid])]
    extra = [f"{rid}: the trainer drops it, cleanpipe builds {ours[rid]}"
             for rid in ours if rid not in theirs and ours[rid][1] > 0]
    kept_empty = [rid for rid in kept if theirs.get(rid, (0, 0))[1] < 1]
    problems = mismatched + extra + [f"{rid}: kept by cleanpipe, no supervised token in the"
                                     " trainer" for rid in kept_empty]
    assert not problems, f"{name}: {len(problems)} rows differ:\n" + "\n".join(problems[:20])


# -- TRL ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trl_prepare(shared_data: Path) -> Any:
    """TRL's own SFTTrainer dataset preparation: ``prepare(rows, max_length)`` gives
    {row id: (tokens, supervised tokens)} for the rows TRL keeps."""
    trl = pytest.importorskip("trl", reason="pip install -e '.[trainers]'")
    import tempfile

    from datasets import Dataset
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(shared_data / "tokenizers" / "qwen3")
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=8,
                                         intermediate_size=8, num_hidden_layers=1,
                                         num_attention_heads=1, num_key_value_heads=1))
    with tempfile.TemporaryDirectory() as tmp:
        def config(length: int) -> Any:
            return trl.SFTConfig(output_dir=tmp, max_length=length, report_to=[],
                                 dataset_num_proc=None, use_cpu=True,
                                 disable_tqdm=True)

        # completion_only_loss left at None: TRL turns it on for this prompt-completion set,
        # and it has no effect on a messages set (no completion mask)
        trainer = trl.SFTTrainer(model=model, args=config(LENGTHS[0]), processing_class=tok,
                                 train_dataset=Dataset.from_list([
                                     {"prompt": "a", "completion": "b"}]))

        def prepare(rows: list[dict[str, Any]], length: int) -> dict[str, tuple[int, int]]:
            # an IterableDataset: a Dataset would hash the tokenizer at every map (seconds)
            ds = trainer._prepare_dataset(Dataset.from_list(rows).to_iterable_dataset(), tok,
                                          config(length), False, None, "train")
            return {r["row_id"]: (len(r["input_ids"]),
                                  sum(1 for t in r["labels"] if t != -100)) for r in ds}

        yield prepare


def _alpaca_prompt(r: dict[str, Any]) -> str:
    template = ALPACA_INPUT if r["input"] else ALPACA_NO_INPUT
    return template.split("{output}")[0].format(**r)


def _user_turn(r: dict[str, Any]) -> str:
    return "\n".join(x for x in (r["instruction"], r["input"]) if x)


def test_trl_profile_matches_sfttrainer(sets: dict[str, list[dict[str, Any]]],
                                        trl_prepare: Any) -> None:
    cases = [
        # prompt-completion text: a format-string template, the completion ends with eos
        ("alpaca_en as prompt/completion text", sets["alpaca_en"], {"template": "alpaca"},
         [{"row_id": r["row_id"], "prompt": _alpaca_prompt(r), "completion": r["output"]}
          for r in sets["alpaca_en"]], LENGTHS),
        # conversational prompt-completion: prompt and response columns, chat template
        ("alpaca_en as conversational prompt/completion", sets["alpaca_en"], {},
         [{"row_id": r["row_id"], "prompt": [{"role": "user", "content": _user_turn(r)}],
           "completion": [{"role": "assistant", "content": r["output"]}]}
          for r in sets["alpaca_en"]], LENGTHS[:1]),
        ("MedicalGPT as conversational prompt/completion",
         [{"row_id": r["row_id"], "instruction": r["conversations"][0]["value"],
           "input": "", "output": r["conversations"][1]["value"]} for r in sets["medical"]],
         {},
         [{"row_id": r["row_id"],
           "prompt": [{"role": "user", "content": r["conversations"][0]["value"]}],
           "completion": [{"role": "assistant", "content": r["conversations"][1]["value"]}]}
          for r in sets["medical"]], LENGTHS),
        # conversational language modelling: OpenAI messages columns
        ("MedicalGPT as OpenAI messages", _openai(sets["medical"]), {},
         _openai(sets["medical"]), LENGTHS[:1]),
        ("ShareGPT as OpenAI messages", _openai(sets["sharegpt"]), {},
         _openai(sets["sharegpt"]), LENGTHS),
    ]
    for name, ours_rows, params, trl_rows, lengths in cases:
        ours = _cleanpipe(ours_rows, {"name": "trl"}, lengths, **params)
        for length in lengths:
            _compare(f"trl {name} max_length {length}", *ours[length],
                     trl_prepare(trl_rows, length), len(ours_rows))
    # ShareGPT as written (from: human/gpt): TRL renames the keys, not the roles, so Qwen3's
    # template renders nothing and TRL trains on none of it; cleanpipe must say so
    ours = _cleanpipe(sets["sharegpt"], {"name": "trl"}, LENGTHS[:1])
    _compare("trl ShareGPT human/gpt", *ours[LENGTHS[0]],
             trl_prepare(sets["sharegpt"], LENGTHS[0]), N, trained=False)


# -- LLaMA-Factory --------------------------------------------------------------------------
def _llamafactory_counts(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    if not LF_PYTHON.exists():
        if in_ci():
            pytest.fail(f"{LF_PYTHON} missing: make .venv-llamafactory")
        pytest.skip(f"{LF_PYTHON} missing: make .venv-llamafactory")
    for job in jobs:
        job["tokenizer"] = _tokenizer()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([str(LF_PYTHON), str(LF_SCRIPT)], input=json.dumps(jobs),
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


SHAREGPT = {"formatting": "sharegpt"}
OPENAI = {"formatting": "sharegpt", "columns": {
    "messages": "messages", "role_tag": "role", "content_tag": "content",
    "user_tag": "user", "assistant_tag": "assistant", "system_tag": "system"}}
ALPACA = {"formatting": "alpaca", "columns": {
    "prompt": "instruction", "query": "input", "response": "output"}}


def _check_llamafactory(cases: dict[str, tuple[Any, ...]]) -> None:
    jobs = [{"name": name, "rows": rows, "template": template, "cutoff_len": list(lengths),
             **fmt, **opts} for name, (rows, fmt, template, opts, lengths) in cases.items()]
    theirs = _llamafactory_counts(jobs)
    for name, (rows, _fmt, _template, opts, lengths) in cases.items():
        ours = _cleanpipe(rows, {"name": "llamafactory", **opts}, lengths)
        for length in lengths:
            _compare(f"llamafactory {name} cutoff_len {length}", *ours[length],
                     theirs[name][str(length)], len(rows))


def test_llamafactory_profile_matches_supervised_processor(
        sets: dict[str, list[dict[str, Any]]]) -> None:
    # template qwen3: what a Qwen3 user names in LLaMA-Factory
    _check_llamafactory({
        "alpaca_en": (sets["alpaca_en"], ALPACA, "qwen3", {}, LENGTHS),
        "medical": (sets["medical"], SHAREGPT, "qwen3", {}, LENGTHS),
        "sharegpt": (sets["sharegpt"], SHAREGPT, "qwen3", {}, LENGTHS),
    })


@pytest.mark.slow
def test_llamafactory_profile_options_match(sets: dict[str, list[dict[str, Any]]]) -> None:
    _check_llamafactory({
        "sharegpt as OpenAI messages": (_openai(sets["sharegpt"]), OPENAI, "qwen3", {},
                                        LENGTHS),
        # no template named: LLaMA-Factory parses one from the chat template
        "medical, template parsed": (sets["medical"], SHAREGPT, None, {}, LENGTHS),
        "sharegpt, mask_history": (sets["sharegpt"], SHAREGPT, "qwen3",
                                   {"mask_history": True}, LENGTHS),
        "alpaca_en, train_on_prompt": (sets["alpaca_en"], ALPACA, "qwen3",
                                       {"train_on_prompt": True}, LENGTHS),
    })


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
