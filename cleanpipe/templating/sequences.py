"""Turning a record batch into the exact strings a trainer tokenizes, with supervised spans.

Two ways to build the sequence:

* **chat**: a ``messages`` / ``conversations`` column (OpenAI or ShareGPT turns), or prompt
  and response columns mapped to one user and one assistant turn, rendered with the
  tokenizer's chat template (:mod:`cleanpipe.templating.chat`).
* **template**: a format string whose ``{column}`` placeholders are filled from the record,
  e.g. ``"{prompt}{completion}"``, or the built-in ``"alpaca"``. Filled with Arrow kernels.

Supervised spans are the character ranges of assistant turns (chat) or of the response
column (template) inside the rendered string. They cover the answer text only, not the
end-of-turn token, so an empty answer has no supervised token however the template ends.

    >>> import pyarrow as pa
    >>> b = pa.RecordBatch.from_pylist([{"prompt": "Q: 2+2?", "completion": " 4"}])
    >>> r = render_template_batch(b, "{prompt}\\nA:{completion}", "completion")
    >>> r.texts.to_pylist(), r.spans
    (['Q: 2+2?\\nA: 4'], [[(10, 12)]])
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cleanpipe.columns import is_utf8
from cleanpipe.templating.chat import ChatTemplate, TemplateError, parse_tools, to_messages
from cleanpipe.templating.chat_skeleton import CLOSE, OPEN

#: Stanford Alpaca's prompt format (with and without an input), response appended.
ALPACA_INPUT = (
    "Below is an instruction that describes a task, paired with an input that provides further"
    " context. Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n{output}"
)
ALPACA_NO_INPUT = (
    "Below is an instruction that describes a task. Write a response that appropriately"
    " completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n{output}"
)
_EMPTY = pa.scalar("", pa.large_string())
NAMED_TEMPLATES = {"alpaca": (ALPACA_INPUT, ALPACA_NO_INPUT)}


@dataclass
class Rendered:
    """Rendered sequences of one batch.

    ``texts[i]`` is row ``i``'s sequence (null where rendering failed, with the reason in
    ``errors[i]``); ``spans[i]`` its supervised character ranges; ``last[i]`` locates the
    last supervised answer in the source data for truncation: ``(message index or -1,
    offset of the rendered answer inside the source value)``.
    """

    texts: pa.Array
    spans: list[list[tuple[int, int]]]
    last: list[tuple[int, int] | None]
    errors: list[str | None] = field(default_factory=list)


def _column_text(batch: pa.RecordBatch, name: str) -> pa.Array:
    idx = batch.schema.get_field_index(name)
    if idx < 0:
        raise KeyError(f"no column {name!r}; columns: {', '.join(batch.schema.names)}")
    col = batch.column(idx)
    if not is_utf8(col.type):
        col = pc.cast(col, pa.large_string())
    return pc.fill_null(col.cast(pa.large_string()), "")


def _pieces(template: str) -> list[tuple[str, str | None]]:
    out = []
    for literal, fname, spec, conv in string.Formatter().parse(template):
        if spec or conv:
            raise ValueError(f"template placeholders take no format spec: {{{fname}}}")
        out.append((literal, fname))
    return out


def template_response(template: str, response: str) -> str:
    """The column a template supervises: ``response`` if used, else its last placeholder."""
    if template in NAMED_TEMPLATES:
        return response
    names = [f for _, f in _pieces(template) if f is not None]
    return response if response in names or not names else names[-1]


def _fill(batch: pa.RecordBatch, template: str, response: str, n: int
          ) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Vectorised fill: texts, response start and end (in characters)."""
    parts: list[pa.Array] = []
    start = np.zeros(n, dtype=np.int64)
    seen_response = False
    length = np.zeros(n, dtype=np.int64)
    resp_len = np.zeros(n, dtype=np.int64)
    pieces = _pieces(template)
    names = [f for _, f in pieces if f is not None]
    if response not in names and names:
        response = names[-1]  # the answer is the last placeholder unless named otherwise
    for literal, fname in pieces:
        if literal:
            parts.append(pa.array([literal] * n, pa.large_string()))
            length += len(literal)
        if fname is None:
            continue
        col = _column_text(batch, fname)
        parts.append(col)
        ln = pc.utf8_length(col).to_numpy(zero_copy_only=False).astype(np.int64)
        if fname == response:
            if seen_response:
                raise ValueError(f"template uses the response {{{response}}} twice")
            seen_response = True
            start = length.copy()
            resp_len = ln
        length += ln
    if not seen_response:
        raise ValueError(f"template has no {{{response}}} placeholder for the response")
    if not parts:
        return pa.array([""] * n, pa.large_string()), start, start
    texts = pc.binary_join_element_wise(*parts, _EMPTY) if len(parts) > 1 else parts[0]
    return texts, start, start + resp_len


def render_template_batch(batch: pa.RecordBatch, template: str, response: str,
                          suffix: str = "") -> Rendered:
    """Fill ``template`` (or a named one) for every row; the response span per row."""
    n = batch.num_rows
    if template in NAMED_TEMPLATES:
        with_input, without = NAMED_TEMPLATES[template]
        t1, s1, e1 = _fill(batch, with_input + suffix, response, n)
        t2, s2, e2 = _fill(batch, without + suffix, response, n)
        has_input = pc.greater(pc.utf8_length(_column_text(batch, "input")), 0)
        mask = has_input.to_numpy(zero_copy_only=False)
        texts = pc.if_else(has_input, t1, t2)
        start, end = np.where(mask, s1, s2), np.where(mask, e1, e2)
    else:
        texts, start, end = _fill(batch, template + suffix, response, n)
    spans = [[(int(s), int(e))] for s, e in zip(start.tolist(), end.tolist(), strict=True)]
    last = [(-1, 0)] * n
    return Rendered(texts, spans, last, [None] * n)


def _forms(content: str) -> list[tuple[int, str]]:
    """The forms a template may write ``content`` in, as it is first, then trimmed (or with
    its leading newlines trimmed): ``(offset of the form inside content, form)``."""
    return [(0, content), (len(content) - len(content.lstrip()), content.strip()),
            (len(content) - len(content.lstrip("\n")), content.lstrip("\n"))]


def _locate(text: str, content: str, cursor: int) -> tuple[int, int, int] | None:
    """Where ``content`` (or its form after the template's strip) lies at/after ``cursor``.

    Returns (start, end, offset of that form inside ``content``).
    """
    if not content:
        return cursor, cursor, 0
    for offset, form in _forms(content):
        if not form:
            return cursor, cursor, offset
        i = text.find(form, cursor)
        if i >= 0:
            return i, i + len(form), offset
    return None


#: stands for message ``j``'s content in :func:`_marked_places`: the skeletons' own marker
#: (private-use code points a skeleton leaves to jinja)
_MARK = OPEN + "{}" + CLOSE


def _marked_places(template: ChatTemplate, msgs: list[dict], tools: object,
                   text: str) -> list[tuple[int, int, int]] | None:
    """Where the template wrote each message of ``msgs`` in ``text`` (their rendering), for
    a row jinja rendered or an answer after reasoning: ``(start, end, offset)`` per message
    (of an answer after reasoning, its :func:`_answer_start` part), as :func:`_locate` gives.

    jinja cannot say where it wrote a value, and a search takes the first copy of a short
    answer, maybe one in the template's own text (the ``a`` of ``<|im_start|>``). So the
    conversation is rendered again with each content replaced by a marker, and the places
    are read off that rendering: kept only if the text between the markers is the same and
    each marker stands for one form of its content (as written, or trimmed), i.e. the
    template did not look at the contents. Else ``None``.

        >>> t = ChatTemplate("{% for m in messages %}<|im_start|>{{ m.role }}\\n"
        ...                  "{{ m.content }}<|im_end|>{% endfor %}", skeletons=False)
        >>> msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"}]
        >>> text = t.render(msgs)
        >>> _locate(text, "a", 19), _marked_places(t, msgs, None, text)
        ((36, 37, 0), [(17, 19, 0), (51, 52, 0)])
    """
    marks = [_MARK.format(j) for j in range(len(msgs))]
    # an assistant's reasoning stays as it is: the template splits it from the answer
    cuts_at = [_answer_start(m) for m in msgs]
    try:
        marked = template.render([{**m, "content": (m.get("content") or "")[:cut] + mk}
                                  for m, mk, cut in zip(msgs, marks, cuts_at, strict=True)],
                                 tools=tools)
    except TemplateError:
        return None
    cuts = [marked.find(mk) for mk in marks]
    if min(cuts, default=0) < 0 or any(marked.count(mk) != 1 for mk in marks) or \
            cuts != sorted(cuts):
        return None
    # the template's own text: before the first marker, between two, after the last
    between, prev = [], 0
    for cut, mk in zip(cuts, marks, strict=True):
        between.append(marked[prev:cut])
        prev = cut + len(mk)
    between.append(marked[prev:])
    places = []
    at = len(between[0])
    if not text.startswith(between[0]):
        return None
    for m, after, cut in zip(msgs, between[1:], cuts_at, strict=True):
        content = (m.get("content") or "")[cut:]
        for offset, form in _forms(content):
            if text.startswith(form, at) and text.startswith(after, at + len(form)):
                places.append((at, at + len(form), offset))
                at += len(form) + len(after)
                break
        else:
            return None
    return places if at == len(text) else None


_THINK = "</think>"


def _answer_start(m: dict) -> int:
    """Where the text a template writes as message ``m``'s answer starts in its content:
    after the last ``</think>`` of an assistant turn (templates that split reasoning from
    the answer re-emit both parts, and the supervised text is the answer), else 0.

        >>> _answer_start({"role": "assistant", "content": "<think>x</think>a"})
        16
    """
    content = m.get("content")
    if m.get("role") != "assistant" or not isinstance(content, str):
        return 0
    at = content.rfind(_THINK)
    return at + len(_THINK) if at >= 0 else 0


def render_chat_rows(rows: list[list[dict] | None], template: ChatTemplate,
                     tools: list | None = None) -> Rendered:
    """Render each conversation and locate its assistant turns in the rendered string:
    where the template wrote them when a skeleton filled the row, else by searching; where
    the text found occurs again, by a rendering with markers (:func:`_marked_places`)."""
    texts: list[str | None] = []
    spans: list[list[tuple[int, int]]] = []
    last: list[tuple[int, int] | None] = []
    errors: list[str | None] = []
    for i, msgs in enumerate(rows):
        msgs = msgs or []
        try:
            if not msgs:
                raise TemplateError("no messages")
            text, placed = template.render_placed(msgs, tools=tools[i] if tools else None)
        except TemplateError as e:
            texts.append(None)
            spans.append([])
            last.append(None)
            errors.append(str(e))
            continue
        cursor, row_spans, row_last, err = 0, [], None, None
        markable = True  # a row is rendered with markers once at most
        by_marks = False
        for j, m in enumerate(msgs):
            content = m.get("content") or ""
            where = placed[j] if placed is not None else None
            cut = _answer_start(m)
            if cut:
                content = content[cut:]
                if not by_marks:  # a skeleton's place is of the whole content
                    where = None
            if where is None:
                where = _locate(text, content, cursor)
                if markable and where is not None and where[1] > where[0] and \
                        text.find(text[where[0]:where[1]], where[0] + 1) >= 0:
                    # the text found occurs again: it may be the template's own (a
                    # one-letter answer); the markers tell which
                    markable = False
                    marked = _marked_places(template, msgs, tools[i] if tools else None,
                                            text)
                    if marked is not None:
                        placed, by_marks = list(marked), True
                        where = placed[j]
            if where is None:
                err = f"turn {j} ({m.get('role')}) not found in the rendered template"
                break
            s, e, off = where
            if m.get("role") == "assistant":
                row_spans.append((s, e))
                row_last = (j, off + len(m.get("content") or "") - len(content))
            cursor = e
        texts.append(text)
        spans.append(row_spans if err is None else [])
        last.append(row_last)
        errors.append(err)
    return Rendered(pa.array(texts, pa.large_string()), spans, last, errors)


def _turn_columns(batch: pa.RecordBatch, prompt_fields: list[str], response_field: str
                  ) -> tuple[pa.Array, pa.Array]:
    """The user turn (the prompt fields present, joined) and the answer of every row."""
    cols = [_column_text(batch, f) for f in prompt_fields if batch.schema.get_field_index(f) >= 0]
    if not cols:
        raise KeyError(f"none of the prompt fields {prompt_fields} is a column")
    # Non-empty prompt parts joined by a newline, as LLaMA-Factory joins instruction/input.
    prompt = cols[0]
    for c in cols[1:]:
        sep = pc.if_else(pc.greater(pc.utf8_length(c), 0), "\n", "")
        prompt = pc.binary_join_element_wise(prompt, sep.cast(pa.large_string()), c, _EMPTY)
    return prompt, _column_text(batch, response_field)


def render_column_rows(batch: pa.RecordBatch, prompt_fields: list[str], response_field: str,
                       system_field: str | None, template: ChatTemplate) -> Rendered:
    """:func:`render_chat_rows` of the rows :func:`chat_rows_from_batch` builds from prompt
    and response columns: the same texts and errors, mostly made by Arrow kernels
    (:meth:`~cleanpipe.templating.chat_skeleton.SkeletonRenderer.render_columns`); the
    rows that cannot be go through :func:`render_chat_rows`.

    An answer's span is where the template wrote it, as :func:`render_chat_rows` gives it
    for a row a skeleton filled.

        >>> from cleanpipe.templating.chat import ChatTemplate
        >>> t = ChatTemplate("{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}"
        ...                  "{% endfor %}")
        >>> b = pa.record_batch({"q": ["hi"], "a": [" a "]})
        >>> r = render_column_rows(b, ["q"], "a", None, t)
        >>> r.texts.to_pylist(), r.spans, r.last
        (['<user>hi<assistant>a'], [[(19, 20)]], [(1, 1)])
    """
    n = batch.num_rows
    user, answer = _turn_columns(batch, prompt_fields, response_field)
    system = None
    if system_field is not None and batch.schema.get_field_index(system_field) >= 0:
        system = batch.column(batch.schema.get_field_index(system_field))
    texts: list[pa.Array] = []
    at: list[np.ndarray] = []
    spans: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    last: list[tuple[int, int] | None] = [None] * n
    errors: list[str | None] = [None] * n
    left = np.ones(n, dtype=bool)
    renderer = template.skeletons
    if renderer is not None and n and (system is None or is_utf8(system.type)):
        # an answer holding </think> is located after it: render_chat_rows does that
        plain = ~pc.match_substring(answer, "</think>").to_numpy(zero_copy_only=False)
        with_system = np.zeros(n, dtype=bool) if system is None else pc.fill_null(
            pc.utf8_length(system), 0).to_numpy(zero_copy_only=False) > 0
        for own_system in (False, True):
            rows = np.flatnonzero(plain & (with_system == own_system))
            if not rows.size:
                continue
            cols = [user, answer]
            if own_system:
                assert system is not None
                cols.insert(0, system.cast(pa.large_string()))
            if rows.size < n:  # a shape of all rows (the usual case) needs no copy
                cols = [c.take(pa.array(rows)) for c in cols]
            roles = ("system",) * own_system + ("user", "assistant")
            for f in renderer.render_columns(roles, cols, gen=False):
                mine = rows[f.rows]
                texts.append(f.texts)
                at.append(mine)
                start, end, skipped = f.places[-1]
                for i, s, e, k in zip(mine.tolist(), start.tolist(), end.tolist(),
                                      skipped.tolist(), strict=True):
                    spans[i] = [(s, e)]
                    last[i] = (len(roles) - 1, k)
                left[mine] = False
    rest = np.flatnonzero(left)
    if rest.size:
        sub = batch.take(pa.array(rest))
        one = render_chat_rows(chat_rows_from_batch(sub, None, prompt_fields, response_field,
                                                    system_field, {}), template)
        texts.append(one.texts)
        at.append(rest)
        for i, sp, la, er in zip(rest.tolist(), one.spans, one.last, one.errors, strict=True):
            spans[i], last[i], errors[i] = sp, la, er
    if not texts:
        return Rendered(pa.array([], pa.large_string()), spans, last, errors)
    order = pa.array(np.argsort(np.concatenate(at), kind="stable"))
    return Rendered(pa.concat_arrays(texts).take(order), spans, last, errors)


def chat_rows_from_batch(batch: pa.RecordBatch, messages_field: str | None,
                         prompt_fields: list[str], response_field: str,
                         system_field: str | None, role_map: dict[str, str]
                         ) -> list[list[dict]]:
    """Messages per row: from the messages column, or built from prompt/response columns."""
    if messages_field is not None:
        raw = batch.column(batch.schema.get_field_index(messages_field)).to_pylist()
        rows = [to_messages(r, role_map) for r in raw]
    else:
        prompt, answer = _turn_columns(batch, prompt_fields, response_field)
        rows = [[{"role": "user", "content": u}, {"role": "assistant", "content": a}]
                for u, a in zip(prompt.to_pylist(), answer.to_pylist(), strict=True)]
    if system_field is not None and batch.schema.get_field_index(system_field) >= 0:
        systems = batch.column(batch.schema.get_field_index(system_field)).to_pylist()
        for r, s in zip(rows, systems, strict=True):
            if s:
                r.insert(0, {"role": "system", "content": s})
    return rows


def tools_from_batch(batch: pa.RecordBatch, tools_field: str | None) -> list | None:
    if tools_field is None or batch.schema.get_field_index(tools_field) < 0:
        return None
    return [parse_tools(v) for v in batch.column(
        batch.schema.get_field_index(tools_field)).to_pylist()]


def supervised_counts(offsets: list[list[tuple[int, int]]], spans: list[list[tuple[int, int]]],
                      max_length: int | None) -> np.ndarray:
    """Tokens (among the first ``max_length``) whose character range overlaps a span."""
    out = np.zeros(len(offsets), dtype=np.int64)
    for i, (offs, sp) in enumerate(zip(offsets, spans, strict=True)):
        if not sp:
            continue
        o = np.asarray(offs[:max_length] if max_length else offs, dtype=np.int64).reshape(-1, 2)
        hit = np.zeros(len(o), dtype=bool)
        for s, e in sp:
            if e > s:
                hit |= (o[:, 0] < e) & (o[:, 1] > s) & (o[:, 1] > o[:, 0])
        out[i] = int(hit.sum())
    return out
