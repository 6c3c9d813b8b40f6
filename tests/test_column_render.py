"""Prompt and response columns rendered by Arrow kernels (``render_column_rows``) give what
rendering each row's messages gives (``render_chat_rows``): the same texts, errors and
answer spans; and an answer's span is where the template wrote it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleanpipe.templating.chat import ChatTemplate
from cleanpipe.templating.chat_skeleton import PY_WHITESPACE
from cleanpipe.templating.sequences import (
    Rendered,
    chat_rows_from_batch,
    render_chat_rows,
    render_column_rows,
)
from tests.guard_data import read_t0
from tests.test_chat_skeleton import _PIECES, _READERS, _TEXTS


def _qwen3(root: Path) -> str:
    cfg = json.loads((root / "tokenizers" / "qwen3" / "tokenizer_config.json").read_text())
    return cfg["chat_template"]


def _both(source: str, batch: pa.RecordBatch, prompt: list[str], response: str,
          system: str | None = None) -> tuple[Rendered, Rendered, ChatTemplate]:
    fast = ChatTemplate(source)
    new = render_column_rows(batch, prompt, response, system, fast)
    old = render_chat_rows(chat_rows_from_batch(batch, None, prompt, response, system, {}),
                           ChatTemplate(source))
    assert new.texts.to_pylist() == old.texts.to_pylist()
    assert new.errors == old.errors
    # both place an answer where the template wrote it, or both search for it
    assert new.spans == old.spans and new.last == old.last
    return new, old, fast


def test_python_whitespace_is_what_str_strip_removes() -> None:
    assert PY_WHITESPACE == "".join(c for c in map(chr, range(0x110000)) if c.isspace())


def test_qwen3_on_t0_columns(shared_data: Path) -> None:
    t = read_t0(shared_data / "sft_self_instruct_t0_50k").slice(0, 6000)
    batch = t.combine_chunks().to_batches()[0]
    new, old, fast = _both(_qwen3(shared_data), batch, ["prompt"], "completion")
    assert new.spans == old.spans
    assert fast.skeletons is not None and fast.skeletons.stats["jinja"] == 0
    assert fast.skeletons.stats["filled"] >= batch.num_rows - 5


def test_an_answer_that_occurs_in_the_template_is_spanned_where_it_was_written(
        shared_data: Path) -> None:
    # Searching after the prompt took the a of <|im_start|> and the d of <|im_end|>.
    from cleanpipe.stages.context_length import ContextLength

    columns = pa.record_batch({"q": ["Pick a letter", "Pick another"], "a": ["a", "d"]})
    _both(_qwen3(shared_data), columns, ["q"], "a")
    chats = pa.RecordBatch.from_pylist([{"messages": [{"role": "user", "content": q},
                                                      {"role": "assistant", "content": a}]}
                                        for q, a in zip(["Pick a letter", "Pick another"],
                                                        ["a", "d"], strict=True)])
    stage = ContextLength(tokenizer=str(shared_data / "tokenizers" / "qwen3"), max_length=64,
                          prompt_fields=["q"], response_field="a")
    for batch in (columns, chats):
        got = stage.render(batch)
        for text, [(s, e)], answer in zip(got.texts.to_pylist(), got.spans, ["a", "d"],
                                          strict=True):
            assert text[s:e] == answer and text[e:] == "<|im_end|>\n"


@pytest.mark.parametrize("source", _READERS)
def test_every_way_of_reading_a_text(source: str) -> None:
    pairs = [(a, b) for a in _TEXTS for b in _TEXTS]
    batch = pa.record_batch({"q": [a for a, _ in pairs], "a": [b for _, b in pairs]})
    _both(source, batch, ["q"], "a")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(*[st.lists(st.sampled_from(_PIECES), max_size=4).map("".join)] * 3),
                min_size=1, max_size=6))
def test_qwen3_on_adversarial_columns(shared_data: Path, rows: list) -> None:
    batch = pa.record_batch({"s": [s for s, _, _ in rows], "q": [q for _, q, _ in rows],
                             "a": [a for _, _, a in rows]})
    _both(_qwen3(shared_data), batch, ["q"], "a", "s")


def test_two_prompt_fields_and_a_system_column(shared_data: Path) -> None:
    rows = json.loads((shared_data / "sft_llamafactory_demos" / "alpaca_en_demo.json")
                      .read_text(encoding="utf-8"))[:300]
    systems = ["", None, "You are terse.", " \n"]
    batch = pa.RecordBatch.from_pylist(
        [{**r, "system": systems[i % len(systems)]} for i, r in enumerate(rows)])
    new, old, fast = _both(_qwen3(shared_data), batch, ["instruction", "input"], "output",
                           "system")
    assert new.spans == old.spans
    assert fast.skeletons is not None and fast.skeletons.stats["filled"] > 250


def test_a_system_column_that_is_not_text_goes_row_by_row(shared_data: Path) -> None:
    batch = pa.record_batch({"q": ["x", "y"], "a": ["1", "2"], "s": [0, 7]})
    new, old, fast = _both(_qwen3(shared_data), batch, ["q"], "a", "s")
    # 0 is no system prompt; 7 is one jinja renders, not being a text
    assert fast.skeletons is not None and fast.skeletons.stats["jinja"] == 1
    assert np.array_equal(new.texts.is_null(), old.texts.is_null())


_SHORT = ["a", "d", "t", "s", "e", "m", "n", "<", "|", "\n", "_", "中", "assistant", "user"]


def test_rows_jinja_renders_get_the_span_where_the_answer_was_written(
        shared_data: Path) -> None:
    """A skeleton places each answer where it wrote it; jinja cannot say, and searching
    after the prompt took the first copy of a short answer, in the template's own text
    (the a of <|im_start|>, or a word of a tool's schema). Rows jinja renders (tools, or
    no skeletons) now get the places a marked rendering gives: those of the skeletons."""
    source = _qwen3(shared_data)
    convs = [[{"role": "user", "content": q}, {"role": "assistant", "content": a}]
             for q in ["Pick one", "", "a user asks", "中文"] for a in _SHORT]
    placed = render_chat_rows(convs, ChatTemplate(source))
    searched = render_chat_rows(convs, ChatTemplate(source, skeletons=False))
    assert searched.texts.to_pylist() == placed.texts.to_pylist()
    assert searched.spans == placed.spans and searched.last == placed.last
    tool = {"type": "function", "function": {"name": "pick", "description": "a tool",
                                             "parameters": {"type": "object"}}}
    with_tools = render_chat_rows(convs, ChatTemplate(source), tools=[[tool]] * len(convs))
    for text, [(s, e)], conv in zip(with_tools.texts.to_pylist(), with_tools.spans, convs,
                                    strict=True):
        answer = conv[1]["content"]
        assert "pick" in text and text[s:e] == answer.strip() and \
            text[e:] == "<|im_end|>\n", (answer, text[s - 30:e + 12])


def test_a_template_that_reads_the_contents_keeps_the_search() -> None:
    """The marked rendering differs where a template looks at a content (here its length):
    then the answer is searched for as before, and the row still renders."""
    t = ChatTemplate("{% for m in messages %}<{{ m.content | length }}>{{ m.content }}"
                     "{% endfor %}", skeletons=False)
    got = render_chat_rows([[{"role": "user", "content": "1"},
                             {"role": "assistant", "content": "1"}]], t)
    assert got.texts.to_pylist() == ["<1>1<1>1"] and got.errors == [None]
    # the search's places, as before: the user's 1 in the first <1>, the answer after it
    assert got.spans == [[(3, 4)]]


def test_a_row_is_rendered_with_markers_once_at_most(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the markers cannot tell (the template reads the contents), a long
    conversation of short turns is not rendered again for each of them."""
    from cleanpipe.templating import sequences

    calls = []
    real = sequences._marked_places
    monkeypatch.setattr(sequences, "_marked_places",
                        lambda *a: calls.append(1) or real(*a))
    t = ChatTemplate("{% for m in messages %}<{{ m.content | length }}>{{ m.content }}"
                     "{% endfor %}", skeletons=False)
    turns = [{"role": r, "content": "1"} for r in ["user", "assistant"] * 20]
    got = render_chat_rows([turns], t)
    assert got.errors == [None] and len(got.spans[0]) == 20 and len(calls) == 1


#: the shapes of common chat templates (turn markers, trimmed or not, roles renamed, turns
#: skipped), written for this test
_SHAPES = {
    "header-trim": "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}"
                   "<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}",
    "inst": "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] "
            "{{ m['content'] }} [/INST]{% elif m['role'] == 'assistant' %}{{ m['content'] }}"
            "{{ eos_token }}{% endif %}{% endfor %}",
    "renamed-role": "{% for m in messages %}{% set role = 'model' if m['role'] == 'assistant'"
                    " else m['role'] %}<start_of_turn>{{ role }}\n{{ m['content'] | trim }}"
                    "<end_of_turn>\n{% endfor %}",
    "concatenated": "{% for m in messages %}{{ '<|' + m['role'] + '|>' + '\n' + m['content']"
                    " + '<|end|>' + '\n' }}{% endfor %}",
}


@pytest.mark.parametrize("source", list(_SHAPES.values()), ids=list(_SHAPES))
def test_jinja_and_skeletons_place_short_answers_alike(source: str) -> None:
    """On each shape the search got many of these rows wrong (5 to 37 of 54); jinja's
    rows now get the skeletons' places."""
    convs = [[{"role": "user", "content": q}, {"role": "assistant", "content": a}]
             for q in ["Pick one", "", "a user asks"]
             for a in [*_SHORT, " x ", "INST", "model", "end"]]
    tokens = {"bos_token": "<s>", "eos_token": "</s>"}
    fast = ChatTemplate(source, tokens)
    placed = render_chat_rows(convs, fast)
    assert fast.skeletons is not None and fast.skeletons.stats["jinja"] == 0
    searched = render_chat_rows(convs, ChatTemplate(source, tokens, skeletons=False))
    assert searched.texts.to_pylist() == placed.texts.to_pylist()
    assert searched.spans == placed.spans and searched.last == placed.last


def test_an_answer_after_reasoning_is_spanned_where_it_was_written(shared_data: Path) -> None:
    """The supervised text of an answer holding </think> is what follows its last </think>;
    Qwen3 writes the reasoning, then "</think>\\n\\n" and the answer. Searched for from the
    start of the turn, a short answer took the a of "assistant"."""
    source = _qwen3(shared_data)
    convs = [[{"role": "user", "content": "Pick one"},
              {"role": "assistant", "content": f"<think>{why}</think>{a}"}]
             for why in ["hmm", "\nthe user asks\n"] for a in ["a", "t", "s", "ss"]]
    convs.append([{"role": "user", "content": "a"},
                  {"role": "assistant", "content": "<think>r</think>a"},
                  {"role": "user", "content": "b"},
                  {"role": "assistant", "content": "<think>q</think>d"}])
    for template in (ChatTemplate(source), ChatTemplate(source, skeletons=False)):
        got = render_chat_rows(convs, template)
        for text, spans, conv in zip(got.texts.to_pylist(), got.spans, convs, strict=True):
            answers = [m["content"].split("</think>")[-1] for m in conv[1::2]]
            assert [text[s:e] for s, e in spans] == answers
            assert all(text[e:].startswith("<|im_end|>") for _, e in spans)
