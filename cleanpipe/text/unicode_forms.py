"""Which characters Unicode normalisation may change, as an RE2 class: a string with none of
them is already in that normal form, so a normalising pass can skip it.

    >>> import pyarrow as pa, pyarrow.compute as pc
    >>> texts = pa.array(["plain ascii", "caf\u00e9", "cafe\u0301"])
    >>> pc.match_substring_regex(texts, unstable_class("NFC")).to_pylist()
    [False, False, True]
"""

from __future__ import annotations

import unicodedata
from functools import cache


@cache
def _decomposable() -> tuple[int, ...]:
    """BMP characters (from U+0080) with a decomposition mapping, canonical or not."""
    return tuple(cp for cp in range(0x80, 0x10000) if unicodedata.decomposition(chr(cp)))


@cache
def _second_halves() -> frozenset[int]:
    """Characters that are the second half of some BMP character's canonical decomposition
    into two (so they may compose with what precedes them)."""
    second: set[int] = set()
    for cp in _decomposable():
        dec = unicodedata.decomposition(chr(cp))
        if not dec.startswith("<"):
            parts = dec.split()
            if len(parts) == 2:
                second.add(int(parts[1], 16))
    return frozenset(second)


@cache
def unstable_class(form: str) -> str:
    """An RE2 character class of every character that normalisation ``form`` may change.

    A string made only of the other characters is already normalised (Unicode's quick
    check answers YES): each of them is its own normal form, has canonical combining class
    0 (so no reordering) and is never the second half of a canonical composition (so it
    cannot merge with what precedes it; Hangul vowel and trailing jamo compose
    algorithmically and count as unstable). Everything outside the BMP counts as unstable,
    which only costs speed. Built once per process from :mod:`unicodedata` (~16 ms for the
    first form, ~10 ms for each other).
    """
    # A character without a decomposition mapping is its own normal form in every form,
    # except Hangul syllables, which decompose algorithmically (NFD and NFKD).
    changed = {cp for cp in _decomposable()
               if unicodedata.normalize(form, chr(cp)) != chr(cp)}  # type: ignore[arg-type]
    if form in ("NFD", "NFKD"):
        changed.update(range(0xAC00, 0xD7A4))
    second = _second_halves()
    combining = unicodedata.combining
    unstable = [cp for cp in range(0x80, 0x10000)
                if (0xD800 <= cp <= 0xDFFF or cp in second or cp in changed
                    or 0x1161 <= cp <= 0x1175 or 0x11A8 <= cp <= 0x11C2
                    or combining(chr(cp)))]
    ranges: list[list[int]] = []
    for cp in unstable:
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    body = "".join(f"\\x{{{lo:X}}}" if lo == hi else f"\\x{{{lo:X}}}-\\x{{{hi:X}}}"
                   for lo, hi in ranges)
    return f"[{body}\\x{{10000}}-\\x{{10FFFF}}]"
