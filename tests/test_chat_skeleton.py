"""Chat templates rendered from skeletons give jinja's string, byte for byte: on real
conversations with the Qwen3 template, on texts built to take every branch the template
has, and on templates that read texts in every way the tracer knows or must refuse."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cleanpipe.templating.chat import ChatTemplate, to_messages
from cleanpipe.templating.chat_skeleton import SkeletonRenderer, eligible
from tests.guard_data import read_t0


def _qwen3(root: Path) -> str:
    cfg = json.loads((root / "tokenizers" / "qwen3" / "tokenizer_config.json").read_text())
    return cfg["chat_template"]


def _same(source: str, conversations: list[list[dict]], gen: bool = False,
          specials: dict | None = None) -> ChatTemplate:
    fast = ChatTemplate(source, specials)
    slow = ChatTemplate(source, specials, skeletons=False)
    for msgs in conversations:
        try:
            want = slow.render(msgs, add_generation_prompt=gen)
        except Exception as e:  # the same error must come from both
            with pytest.raises(type(e)):
                fast.render(msgs, add_generation_prompt=gen)
            continue
        assert fast.render(msgs, add_generation_prompt=gen) == want, msgs
    # the check of each skeleton's first fills against jinja never had to step in
    assert fast.skeletons is None or fast.skeletons.on
    return fast


def test_qwen3_on_t0_renders_like_jinja_and_skips_jinja(shared_data: Path) -> None:
    t = read_t0(shared_data / "sft_self_instruct_t0_50k").slice(0, 6000)
    convs = [[{"role": "user", "content": p}, {"role": "assistant", "content": c}]
             for p, c in zip(t.column("prompt").to_pylist(),
                             t.column("completion").to_pylist(), strict=True)]
    fast = _same(_qwen3(shared_data), convs)
    assert fast.skeletons is not None
    stats = fast.skeletons.stats
    assert stats["jinja"] == 0
    assert stats["filled"] >= len(convs) - 5  # a handful of traces, the rest filled


def test_qwen3_on_sharegpt_and_tool_conversations(shared_data: Path) -> None:
    convs = []
    demos = shared_data / "sft_llamafactory_demos"
    for name in ("glaive_toolcall_en_demo.json", "glaive_toolcall_zh_demo.json"):
        for rec in json.loads((demos / name).read_text(encoding="utf-8")):
            convs.append(to_messages(rec["conversations"]))
    for line in (demos / "v1_sft_demo.jsonl").read_text(encoding="utf-8").splitlines():
        convs.append(to_messages(json.loads(line)["messages"]))
    for gen in (False, True):
        fast = _same(_qwen3(shared_data), convs, gen=gen)
        assert fast.skeletons is not None and fast.skeletons.stats["filled"] > len(convs) // 2


# Pieces that steer Qwen3's template: reasoning blocks, tool responses, leading newlines,
# and the tracer's own marker characters inside real text.
_PIECES = ["", "hi", "\n", "\n\n", " ", "</think>", "<think>", "<tool_response>",
           "</tool_response>", "\ue000", "\ue0010\ue001", "\ue0001\ue001", "中文", "{{x}}",
           "%s", "<|im_end|>"]
_ROLES = ["user", "assistant", "system", "tool"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_ROLES),
                          st.lists(st.sampled_from(_PIECES), max_size=5).map("".join)),
                min_size=1, max_size=5),
       st.booleans())
def test_qwen3_on_adversarial_texts(shared_data: Path, turns: list, gen: bool) -> None:
    source = _qwen3(shared_data)
    conv = [{"role": r, "content": c} for r, c in turns]
    # twice, so the second run reuses skeletons the first one traced
    _same(source, [conv, [{"role": r, "content": c[::-1]} for r, c in turns], conv], gen=gen)


_READERS = [
    # questions
    "{% for m in messages %}{% if m.content %}[{{ m.content }}]{% else %}(empty){% endif %}"
    "{% endfor %}",
    "{% for m in messages %}{{ m.content | length }}:{{ m.content }};{% endfor %}",
    "{% for m in messages %}{% if m.content == 'stop' %}STOP{% endif %}{{ m.content }}"
    "{% endfor %}",
    "{% for m in messages %}{% if m.content.endswith('?') %}Q:{% endif %}"
    "{{ m.content.find('x') }}{{ m.content }}{% endfor %}",
    "{% for m in messages %}{% if 'x' not in m.content %}-{% endif %}{{ m.content }}"
    "{% endfor %}",
    # transformations, and questions asked of them
    "{% for m in messages %}<{{ m.content | trim }}>{{ m.content.lstrip('a').upper() }}"
    "{% endfor %}",
    "{% for m in messages %}{% set t = (m.content + '!').rstrip() %}"
    "{% if t.startswith('x') %}X{% endif %}{{ t }}{% endfor %}",
    "{% for m in messages %}{{ m.role ~ ': ' ~ m.content }}\n{% endfor %}",
    "{% set ns = namespace(last='') %}{% for m in messages %}{% set ns.last = m.content %}"
    "{% endfor %}{{ ns.last.strip() }}{{ messages | length }}",
    # read in ways the tracer refuses at run time: jinja renders those conversations
    "{% for m in messages %}{{ m.content[:2] }}{% endfor %}",
    "{% for m in messages %}{{ m.content.split('x') | length }}{% endfor %}",
    "{% for m in messages %}{% if m.content < 'm' %}lo{% endif %}{% endfor %}",
    "{% for m in messages %}{{ {'a': 1}.get(m.content, 0) }}{% endfor %}",
    "{% for m in messages %}{{ m.content * 2 }}{% endfor %}",
]
_TEXTS = ["", "x", "stop", "a?", " ax ", "axe\n", "m", "zz", "x!", "\ue0000\ue001", "aaa"]


@pytest.mark.parametrize("source", _READERS)
def test_every_way_of_reading_a_text_renders_like_jinja(source: str) -> None:
    convs = [[{"role": "user", "content": a}, {"role": "assistant", "content": b}]
             for a in _TEXTS for b in _TEXTS]
    fast = _same(source, convs)
    if fast.skeletons is not None and not fast.skeletons.stats["jinja"]:
        assert fast.skeletons.stats["filled"] > len(convs) // 2


_UNSAFE = [
    "{% set x = messages[0].content ~ '' %}{% if 'a' in x %}A{% endif %}",
    "{% if messages[0].content in 'abc' %}A{% endif %}",
    "{% if 'abc'.startswith(messages[0].content) %}A{% endif %}",
    "{{ '%s!' % messages[0].content }}",
    "{{ '{}!'.format(messages[0].content) }}",
    "{{ messages[0].content | replace('a', 'b') }}",
    "{{ messages[0].content | string }}",
    "{{ strftime_now('%Y') }}",
    "{% filter upper %}{{ messages[0].content }}{% endfilter %}",
    "{{ messages[0].content }}\ue000",
    "{% macro f(x) %}{{ x }}{% endmacro %}{% if 'a' in f(messages[0].content) %}A{% endif %}",
    "{% set x %}{{ messages[0].content }}{% endset %}{% if 'a' in x %}A{% endif %}",
    "{% block b %}{{ messages[0].content }}{% endblock %}{% if 'a' in self.b() %}A{% endif %}",
]


@pytest.mark.parametrize("source", _UNSAFE)
def test_templates_that_could_read_texts_unseen_are_left_to_jinja(source: str) -> None:
    env = jinja2.Environment()
    assert not eligible(source, env)
    fast = _same(source, [[{"role": "user", "content": t}] for t in _TEXTS])
    assert fast.skeletons is None


def test_a_skeleton_that_disagrees_with_jinja_switches_them_off() -> None:
    t = jinja2.Environment().from_string("{{ messages[0].content }}")
    calls = []

    def plain(msgs: list, gen: bool) -> str:
        calls.append(msgs)
        return "jinja says " + msgs[0]["content"]

    r = SkeletonRenderer(t, {}, plain)
    assert r.render([{"role": "user", "content": "a"}], False) == "jinja says a"
    assert not r.on
    assert r.render([{"role": "user", "content": "b"}], False) == "jinja says b"
    assert r.stats["jinja"] == 1


def test_messages_whose_keys_come_in_another_order_go_to_jinja() -> None:
    source = "{% for m in messages %}{% for k, v in m.items() %}{{ k }}={{ v }};{% endfor %}" \
             "{% endfor %}"
    fast = _same(source, [[{"content": "a", "role": "user"}], [{"role": "user", "content": "b"}],
                          [{"content": "c", "role": "user"}]])
    assert fast.skeletons is not None and fast.skeletons.stats["jinja"] == 2


def test_messages_with_more_than_role_and_content_go_to_jinja() -> None:
    source = "{% for m in messages %}{{ m.name }}{{ m.content }}{% endfor %}"
    fast = _same(source, [[{"role": "user", "content": "a", "name": "n"}]] * 3)
    assert fast.skeletons is not None and fast.skeletons.stats["jinja"] == 3
