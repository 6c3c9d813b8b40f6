"""`cleanpipe smoke`: on raw t0 it fails (rows with no trainable tokens give a NaN loss), on
the cleaned output it passes; out-of-range ids fail; exit codes. Skipped without torch."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from cleanpipe import Pipeline
from cleanpipe.cli import main
from cleanpipe.commands.smoke import Tok, build_sequences, load_tokenizer, run_smoke
from tests.conftest import realdata
from tests.guard_data import t0_guard_stages

torch = pytest.importorskip("torch", reason="cleanpipe smoke needs torch (extra 'smoke')")
pytest.importorskip("transformers", reason="cleanpipe smoke needs transformers (extra 'smoke')")

EOS = "<|endoftext|>"


def _word_tokenizer() -> Tok:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[PAD]": 0, "[UNK]": 1, "<eos>": 2, **{w: i + 3 for i, w in enumerate(
        "what is two plus two four the sky blue yes no".split())}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return Tok(tok, len(vocab), pad_id=0, eos_id=2)


def test_build_sequences_masks_prompt_and_pad() -> None:
    ids, labels = build_sequences([[5, 6], []], [[7, 0, 8], [0]], pad_id=0, eos_id=2)
    assert ids == [[5, 6, 7, 0, 8, 2], [0, 2]]
    assert labels == [[-100, -100, 7, -100, 8, 2], [-100, 2]]


def test_small_fixture_passes_and_fails_on_an_empty_response() -> None:
    tok = _word_tokenizer()
    good = pa.table({"prompt": ["what is two plus two", "the sky"],
                     "completion": [" four", " blue"]})
    r = run_smoke(good, tok, batch_size=2)
    assert r.passed and len(r.steps) == 1 and r.steps[0]["trainable_tokens"] == 2
    bad = pa.table({"prompt": ["what is two plus two", "the sky"], "completion": [" four", ""]})
    r = run_smoke(bad, tok, batch_size=2)
    assert not r.passed
    assert [b["row"] for b in r.bad_rows] == ["row 1"]
    assert r.bad_rows[0]["problem"] == "no_trainable_tokens"
    # with an eos appended (and trained on) the same row has one token to learn
    assert run_smoke(bad, tok, batch_size=2, append_eos=True).passed


def test_out_of_range_ids_fail_before_the_model_sees_them() -> None:
    tok = _word_tokenizer()
    t = pa.table({"input_ids": [[3, 4, 5], [3, 4, 99]], "labels": [[-100, 4, 5], [-100, 4, 5]]})
    r = run_smoke(t, tok, batch_size=2)
    assert not r.passed
    assert r.bad_rows == [{"row": "row 1", "problem": "token_id_out_of_range",
                           "detail": f"id 99 outside [0, {tok.vocab_size})"}]
    assert len(r.steps) == 1 and r.steps[0]["rows"] == 1  # the rest still trained


@pytest.mark.realdata
def test_bert_tokenizer_padding_is_switched_off() -> None:
    tok = load_tokenizer(realdata("tokenizers", "bert-minilm"))
    assert tok.pad_id == tok.tokenizer.token_to_id("[PAD]")
    assert len(tok.tokenizer.encode("hello world", add_special_tokens=False).ids) == 2


@pytest.fixture(scope="module")
def t0_clean(tmp_path_factory, shared_data):
    folder = realdata("sft_self_instruct_t0_50k", "data_per_template")
    out = tmp_path_factory.mktemp("t0clean") / "out"
    Pipeline(stages=t0_guard_stages(realdata("tokenizers", "qwen3")),
             fields=["prompt", "completion"]).run(folder, str(out), workers=1)
    return folder, out


def _smoke(path, tmp_path, name):
    tok = realdata("tokenizers", "qwen3")
    report = tmp_path / f"{name}.json"
    code = main(["smoke", str(path), "--tokenizer", str(tok), "--report", str(report)])
    return code, json.loads(report.read_text("utf-8"))


@pytest.mark.realdata
def test_smoke_fails_on_raw_t0(t0_clean, tmp_path) -> None:
    folder, _ = t0_clean
    code, result = _smoke(folder, tmp_path, "raw")
    assert code == 1 and not result["passed"]
    assert any(not s["finite"] for s in result["steps"])
    assert result["bad_rows"] and {b["problem"] for b in result["bad_rows"]} == {
        "no_trainable_tokens"}
    # the rows named are exactly completions that are only the <|endoftext|> literal
    from cleanpipe.io import read_table

    raw = read_table(str(folder))
    for b in result["bad_rows"]:
        completion = raw.column("completion")[int(b["row"].split()[1])].as_py()
        assert completion.replace(EOS, "").strip() == ""


@pytest.mark.realdata
def test_smoke_passes_on_cleaned_t0(t0_clean, tmp_path) -> None:
    _, out = t0_clean
    code, result = _smoke(out, tmp_path, "clean")
    assert code == 0 and result["passed"] and result["bad_rows"] == []
    assert len(result["steps"]) == 16 and all(s["finite"] for s in result["steps"])
    assert all(s["trainable_tokens"] > 0 for s in result["steps"])


@pytest.mark.realdata
def test_smoke_exit_codes(tmp_path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "a", "completion": "b"}) + "\n", "utf-8")
    assert main(["smoke", str(data), "--tokenizer", str(tmp_path / "none.json")]) == 3
    tok = realdata("tokenizers", "qwen3")
    assert main(["smoke", str(data), "--tokenizer", str(tok), "-n", "0"]) == 2
    assert main(["smoke", str(data), "--tokenizer", str(tok), "--response-field", "x"]) == 2
    assert main(["smoke", str(tmp_path / "missing"), "--tokenizer", str(tok)]) == 3


@pytest.mark.realdata
def test_tokenizer_from_the_pipeline(tmp_path) -> None:
    tok = realdata("tokenizers", "qwen3")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"prompt": "2+2=", "completion": "4"}) + "\n", "utf-8")
    pipe = tmp_path / "pipe.yaml"
    pipe.write_text(f"stages:\n  - stage: context_length\n    tokenizer: {tok}\n", "utf-8")
    assert main(["smoke", str(data), "--pipeline", str(pipe), "-n", "1"]) == 0
    (tmp_path / "none.yaml").write_text("stages: []\n", "utf-8")
    assert main(["smoke", str(data), "--pipeline", str(tmp_path / "none.yaml")]) == 2
    assert main(["smoke", str(data)]) == 2


def _cleaned_chat(tmp_path, data) -> str:
    out = tmp_path / "cleaned"
    assert main(["run", "cleanpipe/pipelines/sft_chat.yaml", "-i", str(data), "-o", str(out),
                 "-q", "--no-progress"]) in (0, 1)
    return str(out)


@pytest.mark.realdata
@pytest.mark.parametrize("source", [("sft_medicalgpt_zh", "sharegpt_zh_1K_format.jsonl"),
                                    ("sft_llamafactory_demos", "v1_sft_demo.jsonl")])
def test_smoke_passes_on_cleaned_chat(tmp_path, source) -> None:
    """ShareGPT and OpenAI-style chat, cleaned by the shipped chat pipeline, rendered with
    Qwen3's chat template: every step trains on the assistant turns."""
    out = _cleaned_chat(tmp_path, realdata(*source))
    report = tmp_path / "smoke.json"
    code = main(["smoke", out, "--tokenizer", str(realdata("tokenizers", "qwen3")), "-n", "32",
                 "--max-length", "512", "--report", str(report)])
    result = json.loads(report.read_text("utf-8"))
    assert code == 0 and result["passed"] and result["bad_rows"] == []
    assert len(result["steps"]) == 4 and all(s["trainable_tokens"] > 0 for s in result["steps"])


def test_chat_labels_are_the_assistant_turns() -> None:
    from cleanpipe.cli import SAMPLE_DIR
    from cleanpipe.commands.smoke import _tokenize

    tok = load_tokenizer(SAMPLE_DIR / "tokenizer")
    table = pa.table({"messages": [[{"role": "user", "content": "hello there"},
                                    {"role": "assistant", "content": "hi friend"}]]})
    ids, labels = _tokenize(table, tok, None, None, False)
    trained = tok.tokenizer.decode([t for t in labels[0] if t != -100])
    assert trained.strip() == "hi friend"
    assert len(ids[0]) == len(labels[0]) > len([t for t in labels[0] if t != -100])
