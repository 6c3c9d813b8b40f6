"""The prompt part and the response part of a training record, for near-duplicate tests.

A fine-tuning example is a prompt and a response. Two records that share a long passage but
ask different questions, or give different answers, are different examples even though
their joined text is nearly the same. ``minhash_dedup`` therefore compares the parts one by
one: this module says which fields make each part and extracts their text per row.

``auto`` recognises the usual field names (alpaca ``instruction``/``input`` → ``output``,
``prompt`` → ``completion``, ``question`` → ``answer``...) and chat turns
(``conversations[*].value`` split by ``from``, ``messages[*].content`` split by ``role``:
user and system turns are the prompt, assistant turns the response). Other fields named
next to them join the prompt (they are context the model is given).

    >>> import pyarrow as pa
    >>> from cleanpipe.contract.stage import BatchContext
    >>> b = pa.RecordBatch.from_pylist([{"instruction": "Name a colour.", "input": "",
    ...                                  "output": "Blue."}])
    >>> p = resolve("auto", ["instruction", "input", "output"], None, None, BatchContext(b))
    >>> [s.field for s in p.prompt], [s.field for s in p.response]
    (['instruction', 'input'], ['output'])
    >>> [t.to_pylist() for t in part_texts(p, BatchContext(b))]
    [['Name a colour.\\n'], ['Blue.']]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cleanpipe.contract.stage import BatchContext
from cleanpipe.dedup.rows import PART_SEP
from cleanpipe.dedup.text import join_by_row
from cleanpipe.fields import FieldError

PartsMode = Literal["auto", "joined"]

#: field names (last step of the path, lower-cased) that hold what the model is given
PROMPT_NAMES = frozenset({"system", "instruction", "input", "prompt", "question", "query",
                          "context", "history"})
#: field names that hold what the model learns to write
RESPONSE_NAMES = frozenset({"output", "completion", "response", "answer", "target"})
#: chat turn text → the sibling field naming the speaker
ROLE_OF = {"value": "from", "content": "role"}
#: speakers whose turns are the response (any other speaker's turns are prompt)
ASSISTANT_ROLES = frozenset({"gpt", "assistant", "model", "bot", "chatgpt", "gpt4"})


@dataclass(frozen=True)
class Source:
    """One field feeding a part; with ``role_field``, only the turns whose role is (or, with
    ``assistant`` false, is not) an assistant role."""

    field: str
    role_field: str | None = None
    assistant: bool = False


@dataclass(frozen=True)
class Parts:
    """The fields of the prompt part and of the response part."""

    prompt: tuple[Source, ...]
    response: tuple[Source, ...]


def _leaf(path: str) -> str:
    return path.rsplit(".", 1)[-1].replace("[*]", "").strip().lower()


def _has_field(ctx: BatchContext, path: str) -> bool:
    try:
        ctx.texts(path)
    except FieldError:
        return False
    return True


def resolve(mode: PartsMode, fields: Sequence[str] | None,
            prompt_fields: Sequence[str] | None, response_fields: Sequence[str] | None,
            ctx: BatchContext) -> Parts | None:
    """The parts of this batch's records, or ``None`` to compare the joined ``fields``.

    Explicit ``prompt_fields``/``response_fields`` win; ``joined`` gives ``None``; ``auto``
    needs at least one prompt and one response field among ``fields`` (default: the
    batch's text fields), otherwise the joined text is compared.
    """
    if prompt_fields or response_fields:
        return Parts(tuple(Source(f) for f in prompt_fields or ()),
                     tuple(Source(f) for f in response_fields or ()))
    if mode == "joined":
        return None
    names = list(fields) if fields else list(ctx.text_fields)
    roles = {p[: -len(_leaf(p))] + ROLE_OF[_leaf(p)] for p in names
             if _leaf(p) in ROLE_OF and "[*]" in p}
    prompt: list[Source] = []
    response: list[Source] = []
    other: list[Source] = []
    for name in names:
        leaf = _leaf(name)
        role = name[: -len(leaf)] + ROLE_OF[leaf] if leaf in ROLE_OF else None
        if name in roles:
            continue  # a speaker name, read as the role of its turns
        if role is not None and "[*]" in name and _has_field(ctx, role):
            prompt.append(Source(name, role, assistant=False))
            response.append(Source(name, role, assistant=True))
        elif leaf in PROMPT_NAMES:
            prompt.append(Source(name))
        elif leaf in RESPONSE_NAMES:
            response.append(Source(name))
        else:
            other.append(Source(name))
    if not prompt or not response:
        return None
    return Parts(tuple(prompt + other), tuple(response))


def _source_texts(src: Source, ctx: BatchContext, sep: str) -> pa.Array:
    flat = ctx.texts(src.field)
    values, rows = flat.values, flat.rows
    if src.role_field is not None:
        role = ctx.texts(src.role_field)
        if not np.array_equal(role.rows, rows):
            raise FieldError(f"field {src.field!r}: {src.role_field!r} does not give one role"
                             " per turn")
        names = pc.utf8_lower(pc.fill_null(role.values, "")).to_pylist()
        keep = np.array([(r in ASSISTANT_ROLES) == src.assistant for r in names], dtype=bool)
        values, rows = values.filter(pa.array(keep)), rows[keep]
    return join_by_row(values, rows, ctx.batch.num_rows, sep)


def part_texts(parts: Parts, ctx: BatchContext, sep: str = "\n") -> list[pa.Array]:
    """``[prompt, response]`` text of every row, each part's fields joined by ``sep``."""
    out = []
    for sources in (parts.prompt, parts.response):
        texts = [_source_texts(s, ctx, sep) for s in sources]
        if not texts:
            out.append(pa.array([""] * ctx.batch.num_rows, pa.large_string()))
        elif len(texts) == 1:
            out.append(texts[0])
        else:
            out.append(pc.binary_join_element_wise(*texts, pa.scalar(sep, pa.large_string())))
    return out


def difference_windows(kept: str, dropped: str, width: int) -> list[dict[str, Any]]:
    r"""Per part where two report texts differ, ``width`` characters of each from just
    before the first difference (``at``: its character offset in the part).

        >>> difference_windows("Passage. Who won?\x1eAnn", "Passage. Who lost?\x1eAnn", 12)
        [{'part': 'prompt', 'kept': '…ho won?', 'dropped': '…ho lost?', 'at': 13}]
    """
    if width <= 0:
        return []
    a, b = kept.split(PART_SEP, 1), dropped.split(PART_SEP, 1)
    names = ("prompt", "response") if len(a) == len(b) == 2 else ("text",)
    if len(names) == 1:
        a, b = [kept], [dropped]
    out = []
    for name, x, y in zip(names, a, b, strict=True):
        if x == y:
            continue
        at = next((i for i, (c, d) in enumerate(zip(x, y, strict=False)) if c != d),
                  min(len(x), len(y)))
        start = max(0, at - width // 4)

        def window(t: str, start: int = start) -> str:
            return ("…" if start else "") + t[start:start + width] + (
                "…" if start + width < len(t) else "")
        out.append({"part": name, "kept": window(x), "dropped": window(y), "at": at})
    return out
