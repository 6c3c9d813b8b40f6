"""Text helpers shared by the renderers: invisible characters made visible, snippets.

    >>> visible("a\\u200bb\\u00a0c")
    'a⟨U+200B⟩b⟨U+00A0⟩c'
    >>> snippet("x" * 10, 6)
    'xxxxx…'
"""

from __future__ import annotations

import os
import unicodedata

__all__ = ["codepoint_label", "diff_snippets", "snippet", "visible"]

# Categories a reader cannot see or tell apart from a plain space: format characters
# (zero-width, bidi controls, BOM, tags), controls, separators other than U+0020,
# private use, surrogates and unassigned code points.
_HIDDEN_CATEGORIES = frozenset({"Cf", "Cc", "Zl", "Zp", "Co", "Cs", "Cn"})
_SHOWN_AS = {"\n": "⏎", "\t": "⇥", " ": " "}


def _hidden(ch: str) -> bool:
    cat = unicodedata.category(ch)
    return cat in _HIDDEN_CATEGORIES or (cat == "Zs" and ch != " ")


def visible(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every invisible or look-alike-space character written as ``⟨U+XXXX⟩``.

    Newlines and tabs become ``⏎``/``⇥`` (or stay, with ``keep_newlines``). The result still
    needs escaping for its output format; this only makes characters visible.
    """
    # str.isprintable is False exactly for the hidden categories (and for every space but
    # U+0020): one C-level pass settles the common, clean case.
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch.isprintable():
            out.append(ch)
        elif ch in _SHOWN_AS:
            out.append(ch if keep_newlines and ch != " " else _SHOWN_AS[ch])
        elif _hidden(ch):
            out.append(f"⟨U+{ord(ch):04X}⟩")
        else:
            out.append(ch)
    return "".join(out)


def snippet(text: str | None, width: int, start: int = 0) -> str:
    """At most ``width`` characters of ``text`` from ``start``, with ``…`` marking cuts."""
    if text is None:
        return ""
    head = "…" if start > 0 else ""
    body = text[start:]
    if len(body) > width:
        return head + body[: max(width - 1, 0)] + "…"
    return head + body


def diff_snippets(before: str | None, after: str | None, width: int) -> tuple[str, str]:
    """Snippets of ``before``/``after`` that start a little ahead of their first difference,
    so a fix deep inside a long text is in view."""
    if before is None or after is None:
        return snippet(before, width), snippet(after, width)
    # Character-wise common prefix is exactly what is wanted here (not path components).
    first = len(os.path.commonprefix([before, after]))  # noqa: RUF071
    start = max(0, first - width // 4) if first > width // 2 else 0
    return snippet(before, width, start), snippet(after, width, start)


def codepoint_label(key: str) -> str:
    """``"U+200B"`` → ``"U+200B ZERO WIDTH SPACE"`` (the key unchanged when not a code point)."""
    try:
        ch = chr(int(key.removeprefix("U+"), 16))
    except ValueError:
        return key
    name = unicodedata.name(ch, "")
    if not name and unicodedata.category(ch) == "Cc":
        name = "CONTROL"
    return f"{key} {name}".strip()
