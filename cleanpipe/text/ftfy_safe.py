r"""Which texts ftfy cannot change: the proof behind ``unicode_fix``'s fast path.

``ftfy.fix_and_explain`` rewrites a segment only if one of its steps finds something to act
on; when none does, the loop ends after one pass with the text unchanged. For each step that
is switched on we derive what it can act on from ftfy's own tables and regular expressions
(read at run time, not copied, so a new ftfy release is followed automatically):

* ``unescape_html``: it only replaces matches of ``chardata.HTML_ENTITY_RE``, translated to RE2
  the same way as the badness pattern below;
* ``fix_encoding`` (with ``restore_byte_a0``, ``replace_lossy_sequences``,
  ``decode_inconsistent_utf8`` and the C1 step it gates) returns a text unchanged unless
  ``ftfy.badness.is_bad`` matches it. We translate ``BADNESS_RE`` from its parse tree into an
  RE2 pattern that matches at least wherever Python's does (``\s``, ``\w`` and ``.`` become
  "any character", anchors are dropped), so a text RE2 does not match is "not bad";
* ``fix_c1_controls``: U+0080–U+009F; ``fix_latin_ligatures``: its ligature table;
  ``fix_character_width``: its width table (U+3000 included); ``uncurl_quotes``: its two quote
  classes; ``fix_line_breaks``: CR, U+0085, U+2028, U+2029; ``remove_terminal_escapes`` and
  ``remove_control_chars``: ESC and ftfy's control table (every C0 control but tab, LF and
  form feed is treated as unsafe);
* normalization (NFC/NFKC): a character is inert when it is its own normal form, has canonical
  combining class 0, and neither it nor the first character of its full decomposition is a
  combining mark or the second half of a composition pair (canonical pairs, plus the Hangul
  vowel and trailing jamo that compose algorithmically). The decomposition of a string of
  inert characters is the concatenation of theirs, each starting with a starter, so nothing
  reorders or composes across characters: the string is its own normal form. (NFD/NFKD: its
  own decomposition and class 0.)

So a text that contains no unsafe code point and does not match the badness pattern is
returned unchanged by ``ftfy.fix_text`` with that configuration. Everything else goes to
ftfy. The exactness tests on real corpora are the judge of this argument.
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from functools import cache
from pathlib import Path

import ftfy
from ftfy import badness, chardata

if sys.version_info >= (3, 11):
    import re._constants as sre_constants
    import re._parser as sre_parse
else:  # pragma: no cover - Python 3.10
    import sre_constants
    import sre_parse

_MAX_CP = 0x110000
_SURROGATES = range(0xD800, 0xE000)
# Hangul vowel (V) and trailing (T) jamo: L+V and LV+T compose by algorithm, not by table.
_HANGUL_SECONDS = frozenset(range(0x1161, 0x1176)) | frozenset(range(0x11A8, 0x11C3))
_ANY = r"(?s:.)"


class _Untranslatable(Exception):
    pass


def _esc(cp: int) -> str:
    return f"\\x{{{cp:X}}}"


def _class_items(items: list[tuple[object, object]]) -> str | None:
    """RE2 body of a character class, or None when it holds a category (\\w, \\s)."""
    parts: list[str] = []
    for op, av in items:
        if op is sre_constants.LITERAL:
            parts.append(_esc(int(av)))  # type: ignore[call-overload]
        elif op is sre_constants.RANGE:
            lo, hi = av  # type: ignore[misc]
            parts.append(f"{_esc(lo)}-{_esc(hi)}")
        elif op is sre_constants.NEGATE:
            parts.insert(0, "^")
        elif op is sre_constants.CATEGORY:
            return None
        else:
            raise _Untranslatable(str(op))
    return "".join(parts)


def _to_re2(seq: list[tuple[object, object]]) -> str:
    """A superset RE2 translation of a parsed Python regex (see the module docstring)."""
    out: list[str] = []
    for op, av in seq:
        if op is sre_constants.LITERAL:
            out.append(_esc(int(av)))  # type: ignore[call-overload]
        elif op is sre_constants.NOT_LITERAL:
            out.append(f"[^{_esc(int(av))}]")  # type: ignore[call-overload]
        elif op is sre_constants.IN:
            items = list(av)  # type: ignore[call-overload]
            negated = any(o is sre_constants.NEGATE for o, _ in items)
            body = _class_items(items)
            if body is None:
                # A class with \s or \w: "any character" matches more, which is all we need
                # (a negated one would match less, so refuse it).
                if negated:
                    raise _Untranslatable("negated category")
                out.append(_ANY)
            else:
                out.append(f"[{body}]")
        elif op is sre_constants.ANY:
            out.append(_ANY)
        elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT):
            lo, hi, sub = av  # type: ignore[misc]
            if lo > 1000 or (hi != sre_constants.MAXREPEAT and hi > 1000):
                raise _Untranslatable("repeat bound")
            upper = "" if hi == sre_constants.MAXREPEAT else str(hi)
            out.append(f"(?:{_to_re2(list(sub))}){{{lo},{upper}}}")
        elif op is sre_constants.SUBPATTERN:
            _group, add_flags, del_flags, sub = av  # type: ignore[misc]
            if add_flags or del_flags:
                raise _Untranslatable("inline flags")
            out.append(f"(?:{_to_re2(list(sub))})")
        elif op is sre_constants.BRANCH:
            out.append("(?:" + "|".join(_to_re2(list(b)) for b in av[1]) + ")")  # type: ignore[index]
        elif op is sre_constants.AT:
            continue  # dropping an anchor only lets the pattern match in more places
        else:
            raise _Untranslatable(str(op))
    return "".join(out)


def _regex_re2(regex: re.Pattern[str]) -> str | None:
    if regex.flags & (sre_constants.SRE_FLAG_IGNORECASE | sre_constants.SRE_FLAG_LOCALE):
        return None
    try:
        return _to_re2(list(sre_parse.parse(regex.pattern, regex.flags)))
    except _Untranslatable:
        return None


@cache
def badness_re2() -> str | None:
    """RE2 pattern matching every text ftfy's ``is_bad`` matches (None: not translatable)."""
    return _regex_re2(badness.BADNESS_RE)


@cache
def entity_re2() -> str | None:
    """RE2 pattern matching every text in which ftfy's ``unescape_html`` finds an entity."""
    return _regex_re2(chardata.HTML_ENTITY_RE)


@cache
def _composition_seconds() -> frozenset[int]:
    out: set[int] = set(_HANGUL_SECONDS)
    for cp in range(_MAX_CP):
        dec = unicodedata.decomposition(chr(cp))
        if dec and not dec.startswith("<"):
            parts = dec.split()
            if len(parts) == 2:
                out.add(int(parts[1], 16))
    return frozenset(out)


NORMALIZATION_TABLE = Path(__file__).with_name("normalization_unsafe.json")
""":func:`normalization_unsafe` for the Unicode versions it was written for, as code point
ranges keyed ``"<unicodedata version>/<form>"`` (``python -m cleanpipe.text.ftfy_safe``
writes it; ``tests/test_unicode_fix*`` checks it against the computation)."""


@cache
def normalization_unsafe(form: str) -> frozenset[int]:
    """Non-ASCII code points that are not inert under ``form`` (see the module docstring).

    Read from :data:`NORMALIZATION_TABLE` when it holds this Python's Unicode version:
    computing it walks every code point, ~2.4 s in every process that fixes text.
    """
    shipped = _shipped_tables().get(f"{unicodedata.unidata_version}/{form}")
    if shipped is not None:
        return frozenset(cp for lo, hi in shipped for cp in range(lo, hi + 1))
    return computed_normalization_unsafe(form)


@cache
def _shipped_tables() -> dict[str, list[list[int]]]:
    try:
        return json.loads(NORMALIZATION_TABLE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def computed_normalization_unsafe(form: str) -> frozenset[int]:
    """:func:`normalization_unsafe` computed from :mod:`unicodedata`."""
    decompose = "NFKD" if form in ("NFKC", "NFKD") else "NFD"
    composing = form in ("NFC", "NFKC")
    seconds = _composition_seconds()
    out: set[int] = set()
    for cp in range(0x80, _MAX_CP):
        if cp in _SURROGATES:
            continue
        ch = chr(cp)
        if unicodedata.combining(ch) or cp in seconds or unicodedata.normalize(form, ch) != ch:
            out.add(cp)
            continue
        if composing:
            first = unicodedata.normalize(decompose, ch)[0]
            if unicodedata.combining(first) or ord(first) in seconds:
                out.add(cp)
    return frozenset(out)


def write_normalization_table(path: Path = NORMALIZATION_TABLE) -> None:
    """Add this Python's Unicode version to the shipped table (all four forms)."""
    tables = dict(_shipped_tables()) if path == NORMALIZATION_TABLE else {}
    for form in ("NFC", "NFD", "NFKC", "NFKD"):
        ranges = _ranges(computed_normalization_unsafe(form))
        tables[f"{unicodedata.unidata_version}/{form}"] = [[lo, hi] for lo, hi in ranges]
    path.write_text(json.dumps(tables, sort_keys=True, separators=(",", ":")) + "\n",
                    encoding="utf-8")


def _ascii_unsafe(unescape_html: object) -> set[int]:
    # C0 controls but tab, LF and form feed (CR line breaks, ESC sequences and ftfy's control
    # table all live here) and DEL; '&' too when entities are decoded but their pattern
    # cannot be translated.
    out = {cp for cp in range(0x20) if cp not in (0x09, 0x0A, 0x0C)} | {0x7F}
    if unescape_html is not False and entity_re2() is None:
        out.add(ord("&"))
    return out


def _quote_chars() -> set[int]:
    out: set[int] = set()
    for regex in (chardata.SINGLE_QUOTE_RE, chardata.DOUBLE_QUOTE_RE):
        tree = list(sre_parse.parse(regex.pattern))
        if len(tree) != 1 or tree[0][0] is not sre_constants.IN:
            raise _Untranslatable("quote regex shape")
        for op, av in tree[0][1]:  # type: ignore[union-attr]
            if op is sre_constants.LITERAL:
                out.add(int(av))
            elif op is sre_constants.RANGE:
                out.update(range(av[0], av[1] + 1))
            else:
                raise _Untranslatable("quote regex item")
    return out


@cache
def unsafe_codepoints(config: ftfy.TextFixerConfig) -> frozenset[int] | None:
    """Code points ftfy with ``config`` may act on, besides the badness pattern.

    None means no proof is available for non-ASCII text (every non-ASCII text goes to ftfy).
    """
    out = _ascii_unsafe(config.unescape_html)
    out.update(range(0x80, 0xA0))
    if config.fix_encoding and badness_re2() is None:
        return None
    if config.fix_latin_ligatures:
        out.update(chardata.LIGATURES)
    if config.fix_character_width:
        out.update(chardata.WIDTH_MAP)
    if config.uncurl_quotes:
        try:
            out.update(_quote_chars())
        except _Untranslatable:
            return None
    if config.fix_line_breaks:
        out.update((0x0D, 0x85, 0x2028, 0x2029))
    if config.remove_control_chars:
        out.update(chardata.CONTROL_CHARS)
    if config.normalization is not None:
        out.update(normalization_unsafe(config.normalization))
    out.difference_update(_SURROGATES)  # cannot occur in Arrow strings (valid UTF-8)
    return frozenset(out)


def _ranges(cps: frozenset[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for cp in sorted(cps):
        if out and out[-1][1] == cp - 1:
            out[-1] = (out[-1][0], cp)
        else:
            out.append((cp, cp))
    return out


@cache
def needs_ftfy_regex(config: ftfy.TextFixerConfig) -> str:
    """RE2 pattern that matches every text ftfy with ``config`` might change.

    A text it does not match is returned unchanged by ``ftfy.fix_text(text, config)``.
    """
    cps = unsafe_codepoints(config)
    if cps is None:
        cps = frozenset(_ascii_unsafe(config.unescape_html)) | frozenset(range(0x80, 0xD800)) \
            | frozenset(range(0xE000, _MAX_CP))
    parts = [_esc(lo) if lo == hi else f"{_esc(lo)}-{_esc(hi)}" for lo, hi in _ranges(cps)]
    pattern = "[" + "".join(parts) + "]"
    if config.fix_encoding and unsafe_codepoints(config) is not None:
        pattern += "|" + badness_re2()  # type: ignore[operator]
    if config.unescape_html is not False and entity_re2() is not None:
        pattern += "|" + entity_re2()  # type: ignore[operator]
    return pattern


if __name__ == "__main__":
    write_normalization_table()
    print(f"{NORMALIZATION_TABLE}: Unicode {unicodedata.unidata_version}")
