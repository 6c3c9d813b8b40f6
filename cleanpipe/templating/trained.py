"""The token sequences and labels a trainer builds from records, under a trainer profile.

Each builder follows one trainer's documented rules (see :mod:`cleanpipe.templating.profiles`):

* **trl**: prompt-completion records (a format-string template, or prompt/response columns
  rendered with the chat template) are tokenized as prompt and prompt + completion; the
  completion starts where the two token lists diverge and is the only part with labels
  (``completion_only_loss``). A messages column is one conversation with every token
  labelled. Non-chat completions end with the eos token. Then ``max_length`` cuts the
  joined sequence (``keep_start``: the first tokens).
* **llamafactory**: the template is parsed from the chat template as LLaMA-Factory parses it
  (system, user and assistant slots; a reasoning template when the assistant slot holds
  ``<think>``); each slot is tokenized on its own; every (prompt, answer) turn takes its
  share of ``cutoff_len`` (:func:`infer_seqlen`); answers carry labels.
* **axolotl**: the prompt is tokenized apart from the answer; the answer and the eos token
  that ends it carry labels unless ``train_on_inputs``; rows over ``sequence_len`` are
  dropped, truncated or refused (``excess_length_strategy``).

    >>> infer_seqlen(10, 300, 100)   # a long answer keeps what the prompt leaves
    (10, 90)
    >>> infer_seqlen(300, 10, 100)   # a long prompt is cut, the answer kept whole
    (90, 10)
    >>> infer_seqlen(300, 200, 100)  # both long: shared in proportion
    (60, 40)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cleanpipe.templating.chat import KNOWN_ROLES, ChatTemplate, TemplateError
from cleanpipe.templating.profiles import (
    AxolotlTrainer,
    LlamaFactoryTrainer,
    Profile,
    TrlTrainer,
)
from cleanpipe.templating.tokenizer import LoadedTokenizer

_SLOT = "{{content}}"


@dataclass
class Records:
    """One batch as the profiles read it.

    Template records have ``prompts`` (the rendered text before the answer) and ``answers``
    (the answer and the rest of the template). Chat records have ``messages``; with
    ``from_columns`` they were built from prompt/response columns (one prompt-completion
    pair each), else they come from a messages column. ``errors[i]`` says why row ``i`` could
    not be rendered.
    """

    errors: list[str | None]
    prompts: list[str] | None = None
    answers: list[str] | None = None
    messages: list[list[dict[str, Any]]] | None = None
    from_columns: bool = False
    tools: list[Any] | None = None
    #: format-string templates: the tokenizer adds its special tokens (BOS...) to the text
    add_special_tokens: bool = True


@dataclass
class Trained:
    """What the trainer makes of each row.

    ``lengths[i]``: tokens before the trainer cuts (-1 where not built); ``ids[i]`` and
    ``labels[i]`` (bool per token: it carries a label) after the cut; ``skipped[i]``: why the
    trainer leaves the row out itself (None: it trains on it).
    """

    lengths: np.ndarray
    ids: list[list[int]]
    labels: list[np.ndarray]
    errors: list[str | None]
    skipped: list[str | None] = field(default_factory=list)

    @property
    def supervised(self) -> np.ndarray:
        """Tokens with a label per row, as trained (0 where skipped or not built)."""
        out = np.array([int(m.sum()) for m in self.labels], dtype=np.int64)
        out[[i for i, s in enumerate(self.skipped) if s]] = 0
        return out


def infer_seqlen(source_len: int, target_len: int, budget: int) -> tuple[int, int]:
    """How LLaMA-Factory shares ``budget`` tokens between a turn's prompt and answer."""
    if target_len * 2 < budget:
        max_target = budget
    elif source_len * 2 < budget:
        max_target = budget - source_len
    else:
        max_target = int(budget * (target_len / (source_len + target_len)))
    new_target = min(max_target, target_len)
    new_source = min(max(budget - new_target, 0), source_len)
    return new_source, new_target


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


def _empty(n: int) -> Trained:
    return Trained(np.full(n, -1, dtype=np.int64), [[] for _ in range(n)],
                   [np.zeros(0, dtype=bool) for _ in range(n)], [None] * n, [None] * n)


def _render(chat: ChatTemplate, msgs: list[dict[str, Any]], tools: Any,
            generation: bool = False) -> str:
    return chat.render(msgs, tools=tools, add_generation_prompt=generation)


# -- trl ------------------------------------------------------------------------------------
def build_trl(p: TrlTrainer, tok: LoadedTokenizer, rec: Records,
              chat: ChatTemplate | None) -> Trained:
    n = len(rec.errors)
    out = _empty(n)
    out.errors = list(rec.errors)
    eos = tok.token_text("eos_token") or ""
    prompts: list[str] = [""] * n
    fulls: list[str] = [""] * n
    paired = rec.messages is None or rec.from_columns
    for i in range(n):
        if out.errors[i]:
            continue
        try:
            if rec.messages is None:
                assert rec.prompts is not None and rec.answers is not None
                answer = rec.answers[i]
                if eos and not answer.endswith(eos):
                    answer += eos  # TRL ends a non-chat completion with eos
                prompts[i], fulls[i] = rec.prompts[i], rec.prompts[i] + answer
            else:
                assert chat is not None
                msgs = rec.messages[i]
                tools = rec.tools[i] if rec.tools else None
                fulls[i] = _render(chat, msgs, tools)
                if paired:
                    prompts[i] = _render(chat, msgs[:-1], tools, generation=True)
        except TemplateError as e:
            out.errors[i] = str(e)
    specials = rec.add_special_tokens if rec.messages is None else False
    todo = [i for i in range(n) if not out.errors[i]]
    full_enc = tok.encode([fulls[i] for i in todo], specials)
    prompt_enc = tok.encode([prompts[i] for i in todo], specials) if paired else None
    completion_only = p.completion_only_loss if p.completion_only_loss is not None else True
    for k, i in enumerate(todo):
        ids = list(full_enc[k].ids)
        labels = np.ones(len(ids), dtype=bool)
        if paired and completion_only:
            assert prompt_enc is not None
            labels[:_common_prefix(list(prompt_enc[k].ids), ids)] = False
        out.lengths[i] = len(ids)
        if p.max_length is not None and len(ids) > p.max_length:
            cut = slice(None, p.max_length) if p.truncation_mode == "keep_start" \
                else slice(-p.max_length, None)
            ids, labels = ids[cut], labels[cut]
        out.ids[i], out.labels[i] = ids, labels
        if not labels.any():
            out.skipped[i] = "TRL drops it: no token carries a label"
            if not ids and rec.messages is not None:
                roles = sorted({str(m.get("role")) for m in rec.messages[i]} - KNOWN_ROLES)
                if roles:
                    out.skipped[i] = (f"TRL drops it: the chat template renders nothing for"
                                      f" the roles {roles}, which TRL passes as written")
    return out


# -- llamafactory ---------------------------------------------------------------------------
@dataclass
class LlamaFactorySlots:
    """The template LLaMA-Factory reads from a chat template when none is named."""

    prefix: str
    system: str
    user: str
    assistant: str
    default_system: str
    reasoning: bool
    thought: tuple[str, str] = ("<think>\n", "\n</think>\n\n")

    @classmethod
    def parse(cls, chat: ChatTemplate, tok: LoadedTokenizer) -> LlamaFactorySlots:
        """Render probe conversations with ``{{content}}`` as the text and read the slots
        off the result, as LLaMA-Factory's ``parse_template`` does."""
        prefix = tok.tokenizer.decode(tok.tokenizer.encode("").ids, skip_special_tokens=False)

        def probe(msgs: list[tuple[str, str]], generation: bool) -> str:
            return chat.render([{"role": r, "content": c} for r, c in msgs],
                               add_generation_prompt=generation)[len(prefix):]

        system = probe([("system", _SLOT)], False)
        user_empty_system = probe([("system", ""), ("user", _SLOT)], True)
        user = probe([("user", _SLOT)], True)
        assistant = probe([("user", _SLOT), ("assistant", _SLOT)], False)[len(user):]
        reasoning = "<think>" in assistant
        assistant = assistant.replace("<think>", "").replace("</think>", "").lstrip("\n")
        default_system = ""
        if len(user) > len(user_empty_system):
            default_system = _inserted(user_empty_system, user)
            user = user[len(system.replace(_SLOT, default_system, 1)):]
        return cls(prefix, system, user, assistant, default_system, reasoning)

    def remove_thought(self, content: str) -> str:
        pattern = re.escape(self.thought[0]) + "(.*?)" + re.escape(self.thought[1])
        return re.sub(pattern, "", content, flags=re.S).lstrip("\n")

    def has_thought(self, content: str) -> bool:
        return self.thought[0].strip() in content or self.thought[1].strip() in content


def _inserted(short: str, long: str) -> str:
    """The characters of ``long`` skipped while walking ``short`` through it."""
    i, extra = 0, []
    for ch in long:
        if i < len(short) and short[i] == ch:
            i += 1
        else:
            extra.append(ch)
    return "".join(extra)


_USER_ROLES = ("user", "tool")


def _lf_turns(msgs: list[dict[str, Any]]) -> tuple[str, list[tuple[str, str]]] | None:
    """(system, [(prompt, answer)...]) as LLaMA-Factory's converter aligns a conversation;
    None where it drops the example (roles out of order, no final answer)."""
    system = ""
    if msgs and msgs[0].get("role") == "system":
        system, msgs = msgs[0].get("content") or "", msgs[1:]
    if not msgs or len(msgs) % 2:
        return None
    for j, m in enumerate(msgs):
        if m.get("role") not in (_USER_ROLES if j % 2 == 0 else ("assistant",)):
            return None
    return system, [(msgs[j].get("content") or "", msgs[j + 1].get("content") or "")
                    for j in range(0, len(msgs), 2)]


def build_llamafactory(p: LlamaFactoryTrainer, tok: LoadedTokenizer, rec: Records,
                       slots: LlamaFactorySlots) -> Trained:
    if rec.messages is None:
        raise ValueError("trainer llamafactory renders with the chat template (its `template`"
                         " option): remove the stage's format-string `template`")
    n = len(rec.errors)
    out = _empty(n)
    out.errors = list(rec.errors)
    thought = slots.thought[0] + slots.thought[1]
    # every slot is tokenized on its own, as LLaMA-Factory does: collect them, encode once
    pieces: list[str] = [thought]
    layout: dict[int, list[tuple[list[int], list[int]]]] = {}
    discard_history = p.mask_history and not p.preserve_thinking
    for i in range(n):
        if out.errors[i]:
            continue
        turns = _lf_turns(rec.messages[i])
        if turns is None:
            out.skipped[i] = ("LLaMA-Factory drops it: turns are not (user, assistant) pairs"
                              " ending with an answer")
            continue
        system, pairs = turns
        system = system or slots.default_system
        row = []
        for t, (prompt, answer) in enumerate(pairs):
            last = t == len(pairs) - 1
            if slots.reasoning and (not p.enable_thinking or (discard_history and not last)):
                answer = slots.remove_thought(answer)
            src = []
            if t == 0:
                if slots.prefix:
                    src.append(slots.prefix)
                if system:
                    src.append(slots.system.replace(_SLOT, system, 1))
            src.append(slots.user.replace(_SLOT, prompt, 1))
            tgt = [slots.assistant.replace(_SLOT, answer, 1)]
            src_ix = list(range(len(pieces), len(pieces) + len(src)))
            pieces.extend(src)
            tgt_ix = list(range(len(pieces), len(pieces) + len(tgt)))
            pieces.extend(tgt)
            if slots.reasoning and (last or not discard_history) \
                    and not slots.has_thought(answer):
                if p.enable_thinking:
                    tgt_ix.insert(0, 0)  # an empty thought, learnt as part of the answer
                else:
                    src_ix.append(0)
            row.append((src_ix, tgt_ix))
        layout[i] = row
    enc = [e.ids for e in tok.encode(pieces, False)]
    for i, row in layout.items():
        pairs_ids = [([t for j in s if pieces[j] for t in enc[j]],
                      [t for j in g if pieces[j] for t in enc[j]]) for s, g in row]
        out.lengths[i] = sum(len(s) + len(g) for s, g in pairs_ids)
        if p.mask_history:
            pairs_ids = pairs_ids[::-1]  # the last turn gets the budget first
        ids: list[int] = []
        labels: list[bool] = []
        total = 0
        for t, (s, g) in enumerate(pairs_ids):
            if total >= p.cutoff_len:
                break
            sl, gl = infer_seqlen(len(s), len(g), p.cutoff_len - total)
            total += sl + gl
            lab = [p.train_on_prompt] * sl + [not (p.mask_history and t != 0)] * gl
            if p.mask_history:
                ids, labels = s[:sl] + g[:gl] + ids, lab + labels
            else:
                ids, labels = ids + s[:sl] + g[:gl], labels + lab
        out.ids[i], out.labels[i] = ids, np.asarray(labels, dtype=bool)
    return out


# -- axolotl --------------------------------------------------------------------------------
def build_axolotl(p: AxolotlTrainer, tok: LoadedTokenizer, rec: Records,
                  chat: ChatTemplate | None, spans: list[list[tuple[int, int]]] | None
                  ) -> Trained:
    n = len(rec.errors)
    out = _empty(n)
    out.errors = list(rec.errors)
    eos = tok.token_text("eos_token")
    eos_id = tok.tokenizer.token_to_id(eos) if eos else None
    todo = [i for i in range(n) if not out.errors[i]]
    if rec.messages is None:
        assert rec.prompts is not None and rec.answers is not None
        prompt_enc = tok.encode([rec.prompts[i] for i in todo], rec.add_special_tokens)
        answer_enc = tok.encode([rec.answers[i] for i in todo], False)
        for k, i in enumerate(todo):
            prompt, answer = list(prompt_enc[k].ids), list(answer_enc[k].ids)
            answer += [eos_id] if eos_id is not None else []
            out.ids[i] = prompt + answer
            out.labels[i] = np.array([p.train_on_inputs] * len(prompt) + [True] * len(answer),
                                     dtype=bool)
    else:
        assert chat is not None and spans is not None
        texts = []
        for i in todo:
            try:
                texts.append(_render(chat, rec.messages[i], rec.tools[i] if rec.tools else None))
            except TemplateError as e:
                out.errors[i] = str(e)
                texts.append("")
        for k, enc in enumerate(tok.encode(texts, False)):
            i = todo[k]
            if out.errors[i]:
                continue
            offs = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)
            ids = np.asarray(enc.ids, dtype=np.int64)
            labels = np.full(len(ids), p.train_on_inputs, dtype=bool)
            for s, e in spans[i]:
                inside = (offs[:, 0] < e) & (offs[:, 1] > s) & (offs[:, 1] > offs[:, 0])
                labels |= inside
                after = np.flatnonzero(offs[:, 0] >= e)
                # train_on_eos "turn": the eos that closes an answer is learnt with it
                if after.size and eos_id is not None and ids[after[0]] == eos_id:
                    labels[after[0]] = True
            out.ids[i], out.labels[i] = ids.tolist(), labels
    for i in todo:
        if out.errors[i]:
            continue
        length = len(out.ids[i])
        out.lengths[i] = length
        if length > p.sequence_len:
            if p.excess_length_strategy == "truncate":
                out.ids[i] = out.ids[i][:p.sequence_len]
                out.labels[i] = out.labels[i][:p.sequence_len]
            else:
                verb = "drops" if p.excess_length_strategy == "drop" else "stops with an error on"
                out.skipped[i] = (f"axolotl {verb} it: {length} tokens > sequence_len"
                                  f" {p.sequence_len}")
        elif length < 2:
            out.skipped[i] = f"axolotl drops it: {length} tokens < min_sample_len 2"
    return out


def build(profile: Profile, tok: LoadedTokenizer, rec: Records, chat: ChatTemplate | None,
          spans: list[list[tuple[int, int]]] | None = None,
          slots: LlamaFactorySlots | None = None) -> Trained:
    """Dispatch to the builder of ``profile`` (not for ``plain``)."""
    if isinstance(profile, TrlTrainer):
        return build_trl(profile, tok, rec, chat)
    if isinstance(profile, LlamaFactoryTrainer):
        assert slots is not None or rec.messages is None
        return build_llamafactory(profile, tok, rec, slots)  # type: ignore[arg-type]
    if isinstance(profile, AxolotlTrainer):
        return build_axolotl(profile, tok, rec, chat, spans)
    raise ValueError(f"no sequence builder for trainer {profile.name!r}")
