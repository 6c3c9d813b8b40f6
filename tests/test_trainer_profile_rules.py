"""Trainer profiles on small fixtures: axolotl's documented rules (expected values derived by
hand), the pipeline-level ``trainer:`` setting, and ``cleanpipe smoke`` under each profile.

The fixture tokenizer splits on whitespace, one token per word, so counts can be read off the
text: ``"Q: a b A: c d"`` is 6 tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from cleanpipe.cli import main
from cleanpipe.contract.stage import Action
from cleanpipe.spec import ConfigError, load_spec_text
from cleanpipe.stages.context_length import ContextLength
from cleanpipe.stages.trainable_tokens import TrainableTokens

WORDS = ["[UNK]", "<eos>", "<user>", "<assistant>", "<system>", "Q:", "A:", "a", "b", "c", "d",
         "e", "f"]
CHAT = "{% for m in messages %}<{{ m.role }}> {{ m.content }} <eos> {% endfor %}"
SAMPLE = Path(__file__).resolve().parent.parent / "cleanpipe" / "sample"


@pytest.fixture
def tok(tmp_path: Path) -> str:
    t = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    t.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<eos>", "chat_template": CHAT}))
    return str(tmp_path)


def _counts(stage: TrainableTokens, rows: list[dict]) -> list[tuple[int, int, str | None]]:
    t = stage.trained(pa.RecordBatch.from_pylist(rows))
    return [(len(t.ids[i]), int(t.supervised[i]), t.skipped[i]) for i in range(len(rows))]


ALPACA_ROWS = [{"instruction": "a b", "output": "c d"},   # Q: a b A: | c d <eos>  = 4 + 3
               {"instruction": "a", "output": ""}]          # Q: a A:   | <eos>      = 3 + 1


def test_axolotl_prompt_is_masked_answer_and_eos_trained(tok: str) -> None:
    stage = TrainableTokens(tokenizer=tok, template="Q: {instruction} A: {output}",
                            trainer="axolotl")
    # the answer tokens and the eos axolotl appends carry labels, the prompt does not
    assert _counts(stage, ALPACA_ROWS) == [(7, 3, None), (4, 1, None)]
    inputs = TrainableTokens(tokenizer=tok, template="Q: {instruction} A: {output}",
                             trainer={"name": "axolotl", "train_on_inputs": True})
    assert _counts(inputs, ALPACA_ROWS) == [(7, 7, None), (4, 4, None)]


def test_axolotl_excess_length_strategies(tok: str) -> None:
    def stage(strategy: str) -> TrainableTokens:
        return TrainableTokens(tokenizer=tok, template="Q: {instruction} A: {output}",
                               trainer={"name": "axolotl", "sequence_len": 5,
                                        "excess_length_strategy": strategy})

    # 7 tokens > 5: drop leaves the row out; truncate keeps Q: a b A: c (one label: c)
    (_n, sup, why), short = _counts(stage("drop"), ALPACA_ROWS)
    assert (sup, short) == (0, (4, 1, None)) and "drops it: 7 tokens > sequence_len 5" in why
    assert _counts(stage("truncate"), ALPACA_ROWS) == [(5, 1, None), (4, 1, None)]
    assert "stops with an error" in str(_counts(stage("raise"), ALPACA_ROWS)[0][2])


def test_axolotl_chat_trains_assistant_turns_and_their_eos(tok: str) -> None:
    rows = [{"messages": [{"role": "user", "content": "a b"},
                          {"role": "assistant", "content": "c"},
                          {"role": "user", "content": "d"},
                          {"role": "assistant", "content": "e f"}]}]
    # <user> a b <eos> <assistant> c <eos> <user> d <eos> <assistant> e f <eos>: 14 tokens;
    # c + its <eos>, e f + their <eos>: 5 labels
    stage = TrainableTokens(tokenizer=tok, trainer="axolotl")
    assert _counts(stage, rows) == [(14, 5, None)]


def test_axolotl_context_length_action_follows_the_strategy(tok: str) -> None:
    batch = pa.RecordBatch.from_pylist(ALPACA_ROWS)
    want = {"drop": Action.DROP, "truncate": Action.FLAG, "raise": Action.FAIL}
    for strategy, action in want.items():
        stage = ContextLength(tokenizer=tok, template="Q: {instruction} A: {output}",
                              trainer={"name": "axolotl", "sequence_len": 5,
                                       "excess_length_strategy": strategy})
        found = stage.process(batch, None).findings  # type: ignore[arg-type]
        assert found.positions(action).tolist() == [0], strategy
    # an action the user sets wins over the strategy
    stage = ContextLength(tokenizer=tok, template="Q: {instruction} A: {output}",
                          trainer={"name": "axolotl", "sequence_len": 5}, action="flag")
    assert stage.process(batch, None).findings.positions(Action.FLAG).tolist() == [0]


def test_trl_and_llamafactory_cut_differently(tok: str) -> None:
    # one long prompt, one short answer: TRL keeps the first 4 tokens (all prompt, so no
    # label survives); LLaMA-Factory gives the answer its share of cutoff_len 4
    rows = [{"instruction": "a a a a a a", "output": "c"}]
    trl = TrainableTokens(tokenizer=tok, trainer={"name": "trl", "max_length": 4})
    lf = TrainableTokens(tokenizer=tok, trainer={"name": "llamafactory", "cutoff_len": 4})
    (n_trl, sup_trl, why_trl), = _counts(trl, rows)
    assert (n_trl, sup_trl) == (4, 0) and "TRL drops it" in str(why_trl)
    # LLaMA-Factory reads the slots off the template (it has no generation prompt): source
    # "<user> a*6 <eos>" (8), target "<assistant> c <eos>" (3); budget 4 and both longer
    # than half of it, so the target gets int(4 * 3 / 11) = 1 token (a label) and the
    # source the other 3
    assert _counts(lf, rows) == [(4, 1, None)]


def test_pipeline_trainer_applies_to_length_stages(tok: str) -> None:
    spec = load_spec_text(f"""
trainer: {{name: llamafactory, cutoff_len: 64}}
stages:
  - {{stage: context_length, tokenizer: {tok}}}
  - {{stage: trainable_tokens, tokenizer: {tok}, trainer: {{name: trl}}}}
""", "p.yaml")
    cl, tt = spec.stages
    assert (cl.profile.name, cl.max_length) == ("llamafactory", 64)
    assert (tt.profile.name, tt.profile.length) == ("trl", 1024)
    assert spec.config_dict()["trainer"]["cutoff_len"] == 64
    assert cl.describe()["trainer"]["name"] == "llamafactory"


def test_no_trainer_keeps_todays_config(tok: str) -> None:
    spec = load_spec_text(f"stages:\n  - {{stage: context_length, tokenizer: {tok},"
                          " max_length: 8}\n", "p.yaml")
    assert "trainer" not in spec.config_dict() and "trainer" not in spec.stages[0].describe()
    assert spec.stages[0].profile.name == "plain"


@pytest.mark.parametrize("text, message", [
    ("trainer: trll\nstages: []\n", "unknown trainer 'trll'; valid: plain, trl"),
    ("trainer: {name: axolotl, cutoff_len: 8}\nstages: []\n",
     "trainer.cutoff_len: unknown option of trainer axolotl; valid: excess_length_strategy"),
    ("trainer: {name: trl, max_length: 8}\nstages:\n  - {stage: context_length, tokenizer: t,"
     " max_length: 9}\n", "max_length 9 and trainer trl max_length 8 disagree"),
    ("stages:\n  - {stage: context_length, tokenizer: t}\n", "max_length: required"),
    ("trainer: trl\nstages:\n  - {stage: context_length, tokenizer: t,"
     " actions: {too_long: fix}}\n",
     "action fix truncates answers for trainer plain only"),
])
def test_trainer_config_errors_name_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"p\.yaml:") as err:
        load_spec_text(text, "p.yaml")
    assert message in str(err.value)


@pytest.mark.parametrize("trainer", ["trl", "llamafactory", "axolotl"])
@pytest.mark.parametrize("data", ["chat.jsonl", "chat_openai.jsonl"])
def test_smoke_runs_chat_data_under_each_trainer(tmp_path: Path, trainer: str,
                                                 data: str) -> None:
    pytest.importorskip("torch")
    report = tmp_path / "smoke.json"
    code = main(["smoke", str(SAMPLE / data), "--tokenizer", str(SAMPLE / "tokenizer"),
                 "--trainer", trainer, "--max-length", "256", "-n", "8", "--report",
                 str(report)])
    result = json.loads(report.read_text())
    trained = sum(s["trainable_tokens"] for s in result["steps"])
    assert code == 0 and trained > 0, result["problems"]
    # the sample's planted defects (a chat ending on a user turn) are rows a trainer may
    # leave out itself; smoke lists them and trains on the rest
    assert {b["problem"] for b in result["bad_rows"]} <= {"left_out_by_trainer"}


def test_smoke_fails_when_the_trainer_leaves_out_every_row(tok: str, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    data = tmp_path / "long.jsonl"
    data.write_text("".join(json.dumps({"instruction": "a b a b", "output": "c d"}) + "\n"
                            for _ in range(4)))
    report = tmp_path / "smoke.json"
    # each row is 8 tokens under the chat template; axolotl drops rows over sequence_len 6
    code = main(["smoke", str(data), "--tokenizer", tok, "--trainer", "axolotl",
                 "--max-length", "6", "--report", str(report)])
    result = json.loads(report.read_text())
    assert code == 1 and "leaves out every row" in result["problems"][0]
    assert {b["problem"] for b in result["bad_rows"]} == {"left_out_by_trainer"}
