"""Chat templates rendered the way ``transformers`` renders them, and the message mapping.

``transformers`` compiles ``tokenizer_config.json``'s ``chat_template`` in an immutable
jinja2 sandbox with ``trim_blocks``/``lstrip_blocks``, the ``loopcontrols`` extension, a
``tojson`` filter that keeps non-ASCII text, and the globals ``raise_exception`` and
``strftime_now``. We do the same so that a token count here is the count the trainer sees.

    >>> t = ChatTemplate("{% for m in messages %}<{{ m.role }}>{{ m.content }}\\n{% endfor %}")
    >>> t.render(to_messages([{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]))
    '<user>hi\\n<assistant>yo\\n'
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from cleanpipe.templating.chat_skeleton import (
    CLOSE,
    OPEN,
    Place,
    SkeletonRenderer,
    eligible,
    refuse_traced,
)

#: ShareGPT ``from`` values → chat roles (LLaMA-Factory's and FastChat's spellings).
SHAREGPT_ROLES: dict[str, str] = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "model": "assistant",
    "bot": "assistant",
    "chatgpt": "assistant",
    "system": "system",
    # A function call is something the model writes, so it is supervised like an answer.
    "function_call": "assistant",
    "observation": "tool",
    "tool": "tool",
    "function": "tool",
}

KNOWN_ROLES = frozenset({"system", "user", "assistant", "tool"})


class TemplateError(ValueError):
    """The chat template raised (``raise_exception``) or failed on a record."""


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # jinja's own tojson escapes HTML characters and forces ASCII; transformers replaces it
    # with plain json.dumps so the rendered prompt holds the characters the model sees.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment(tracing: bool) -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = refuse_traced(_tojson) if tracing else _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


@lru_cache(maxsize=32)
def _compile(source: str, tracing: bool = False) -> jinja2.Template:
    return _environment(tracing).from_string(source)


class ChatTemplate:
    """A compiled chat template; ``render`` returns the exact prompt string.

    Conversations of plain ``{role, content}`` messages (no tools, no extra variables) are
    rendered from skeletons (:mod:`cleanpipe.templating.chat_skeleton`) when the template
    allows it, with the same result as jinja; ``skeletons=False`` always runs jinja.
    """

    def __init__(self, source: str, special_tokens: Mapping[str, str | None] | None = None,
                 *, skeletons: bool = True):
        self.source = source
        self.special_tokens = dict(special_tokens or {})
        self._template = _compile(source)
        self.skeletons: SkeletonRenderer | None = None
        marked = any(OPEN in v or CLOSE in v for v in self.special_tokens.values() if v)
        if skeletons and not marked and eligible(source, self._template.environment):
            self.skeletons = SkeletonRenderer(_compile(source, tracing=True),
                                              self.special_tokens, self._jinja)

    def render(self, messages: Sequence[Mapping[str, Any]], tools: Any = None,
               add_generation_prompt: bool = False, **kwargs: Any) -> str:
        return self.render_placed(messages, tools, add_generation_prompt, **kwargs)[0]

    def render_placed(self, messages: Sequence[Mapping[str, Any]], tools: Any = None,
                      add_generation_prompt: bool = False, **kwargs: Any
                      ) -> tuple[str, list[Place | None] | None]:
        """:meth:`render`, and where each message's text went when a skeleton wrote it
        (:meth:`SkeletonRenderer.render_placed`; None when jinja rendered it)."""
        try:
            if self.skeletons is not None and tools is None and not kwargs:
                return self.skeletons.render_placed(messages, add_generation_prompt)
            return self._jinja(list(messages), add_generation_prompt, tools, **kwargs), None
        except TemplateError:
            raise
        except Exception as e:  # jinja errors on odd records become a finding, not a crash
            raise TemplateError(f"{type(e).__name__}: {e}") from e

    def _jinja(self, messages: list[Mapping[str, Any]], add_generation_prompt: bool,
               tools: Any = None, **kwargs: Any) -> str:
        return self._template.render(messages=messages, tools=tools,
                                     add_generation_prompt=add_generation_prompt,
                                     **self.special_tokens, **kwargs)


def _content_text(content: Any) -> str:
    """Message content as text: a string, or a list of parts (``{type, text|value}``)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, Mapping):
                parts.append(str(p.get("text") or p.get("value") or ""))
            elif p is not None:
                parts.append(str(p))
        return "".join(parts)
    return str(content)


def to_messages(raw: Sequence[Mapping[str, Any]] | None,
                role_map: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """ShareGPT ``{from, value}`` or OpenAI ``{role, content}`` turns → ``{role, content}``.

    Unknown roles are kept as written (the ``schema`` stage reports them); ``role_map``
    adds to or overrides :data:`SHAREGPT_ROLES`.
    """
    if not raw:
        return []
    roles = {**SHAREGPT_ROLES, **(role_map or {})}
    out = []
    for m in raw:
        if m is None:
            continue
        if "role" in m and m.get("role") is not None:
            role = str(m["role"])
            content = m.get("content")
        else:
            role = str(m.get("from") or "")
            content = m.get("value")
        msg = {k: v for k, v in m.items() if k not in ("from", "value", "role", "content")
               and v is not None}
        msg["role"] = roles.get(role, role)
        msg["content"] = _content_text(content)
        out.append(msg)
    return out


def parse_tools(value: Any) -> Any:
    """A ``tools`` cell as the list of dicts templates iterate over (JSON text is parsed)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if isinstance(value, Mapping):
        value = [value]
    return list(value) if value else None
