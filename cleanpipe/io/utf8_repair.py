"""Read bytes that are not valid UTF-8 the one way they can be read, and say what was done.

Two kinds of invalid bytes have exactly one sound reading, and are read that way:

- **CESU-8 surrogate pairs**: ``ED A0-AF xx ED B0-BF xx`` is how Java's modified UTF-8,
  MySQL's old ``utf8`` and some JSON writers store a character above U+FFFF (an emoji): the
  UTF-16 surrogate pair, each half written as three bytes. Nothing else produces that
  pattern, and the pair names exactly one character.
- **A single stray byte** between valid UTF-8 text (``caf\\xe9``) that Windows-1252,
  Latin-1 and Latin-9 (ISO-8859-15), the encodings Western text is written in, all read as
  the same character: A0-FF except A4, A6, A8, B4, B8, BC, BD, BE (where Latin-9 has the
  euro sign and other letters). It is a character of such a file pasted into UTF-8 text. A
  multi-byte UTF-8 character that lost bytes leaves a run of two or more invalid bytes,
  which this rule never guesses at.

Everything else has no sound reading: bytes 80-9F (Windows-1252 punctuation, but C1 control
codes in Latin-1), the eight Latin-9 bytes, two or more stray bytes in a row (``\\xe9\\xe8``
is "éè" in Windows-1252 and "éč" in Latin-2), a cut multi-byte character, half a surrogate
pair. Each invalid sequence there becomes U+FFFD, as Python's ``errors="replace"`` does.

One case stays a guess, and the event names the byte so it can be checked: a UTF-8
character cut right after its first byte (``caf\\xc3``) reads as that byte's Latin-1
letter (``cafÃ``). Every change is returned as a :class:`Mend`,
so the reader can record one event per row that says which bytes became what.

    >>> text, mends = mend(b'caf\\xe9 \\xed\\xa0\\xbd\\xed\\xb8\\x80 x\\xff\\xfe')
    >>> text
    'café 😀 x��'
    >>> [m.how for m in mends]
    ['latin1', 'cesu8', 'replaced']
    >>> print(mends[1].describe())
    bytes ED A0 BD ED B8 80 at byte offset 5 are CESU-8 for U+1F600 '😀': read as that character
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

#: one CESU-8 surrogate pair: a high surrogate (ED A0-AF xx) then a low one (ED B0-BF xx)
_CESU_PAIR = re.compile(rb"\xed[\xa0-\xaf][\x80-\xbf]\xed[\xb0-\xbf][\x80-\xbf]")
#: the single bytes whose reading does not depend on which Western encoding wrote them
_AGREED = frozenset(
    b for b in range(0xA0, 0x100)
    if len({bytes([b]).decode(enc) for enc in ("cp1252", "latin-1", "iso8859-15")}) == 1)

#: what :attr:`Mend.how` says, and the event code each is recorded under
REPAIRED, REPLACED = "decode_repaired", "decode_replaced"


@dataclass(frozen=True)
class Mend:
    """Invalid bytes at ``offset`` (in the bytes given to :func:`mend`) and their reading."""

    offset: int
    raw: bytes
    text: str
    how: str  # cesu8 | latin1 | replaced

    @property
    def code(self) -> str:
        """``decode_repaired`` when the bytes were read exactly, else ``decode_replaced``."""
        return REPLACED if self.how == "replaced" else REPAIRED

    def describe(self, where: str | None = None) -> str:
        """One line: which bytes, where (``where``, or the byte offset), and what they became."""
        at = where if where is not None else f"byte offset {self.offset}"
        shown = " ".join(f"{b:02X}" for b in self.raw)
        if self.how == "cesu8":
            return (f"bytes {shown} at {at} are CESU-8 for U+{ord(self.text):04X}"
                    f" {self.text!r}: read as that character")
        if self.how == "latin1":
            return (f"byte {shown} at {at} is not UTF-8: read as Latin-1/Windows-1252"
                    f" {self.text!r} (U+{ord(self.text):04X})")
        return f"bytes {shown} at {at} have no sound reading: replaced by U+FFFD"


def invalid_ranges(data: bytes) -> list[tuple[int, int]]:
    """``[start, end)`` of every invalid UTF-8 sequence, as Python's decoder splits them
    (one C-speed pass; the handler only runs at the bad sequences).

        >>> invalid_ranges(b"a\\xe9b\\xf0\\x9f\\x8d")
        [(1, 2), (3, 6)]
    """
    ranges: list[tuple[int, int]] = []

    def collect(err: UnicodeError) -> tuple[str, int]:
        assert isinstance(err, UnicodeDecodeError)
        ranges.append((err.start, err.end))
        return "", err.end

    codecs.register_error("cleanpipe-collect", collect)
    data.decode("utf-8", errors="cleanpipe-collect")
    return ranges


def _invalid_runs(data: bytes) -> list[tuple[int, int]]:
    """``[start, end)`` of every maximal run of bytes that are not valid UTF-8."""
    runs: list[tuple[int, int]] = []
    for s, e in invalid_ranges(data):
        if runs and runs[-1][1] == s:
            runs[-1] = (runs[-1][0], e)
        else:
            runs.append((s, e))
    return runs


def _cesu_char(pair: bytes) -> str:
    """The character a CESU-8 surrogate pair stands for.

    >>> _cesu_char(b"\\xed\\xa0\\xbc\\xed\\xbd\\x95")
    '🍕'
    """
    halves = pair.decode("utf-8", errors="surrogatepass")  # two surrogate code points
    return halves.encode("utf-16-le", errors="surrogatepass").decode("utf-16-le")


def _read_run(data: bytes, start: int, end: int, guess: bool) -> list[Mend]:
    """The readings of one run of invalid bytes: CESU-8 pairs, and what lies between."""
    out: list[Mend] = []
    pos = start
    pairs = list(_CESU_PAIR.finditer(data, start, end)) if guess else []
    for m in [*pairs, None]:
        seg_end = m.start() if m is not None else end
        if seg_end > pos:
            seg = data[pos:seg_end]
            if guess and len(seg) == 1 and seg[0] in _AGREED:
                out.append(Mend(pos, seg, seg.decode("latin-1"), "latin1"))
            else:
                out.append(Mend(pos, seg, seg.decode("utf-8", errors="replace"), "replaced"))
        if m is not None:
            out.append(Mend(m.start(), m.group(), _cesu_char(m.group()), "cesu8"))
            pos = m.end()
    return out


def mend(data: bytes, guess: bool = True) -> tuple[str, list[Mend]]:
    """``data`` decoded as UTF-8, with its invalid bytes read by the rule above.

    ``guess=False`` (a file transcoded from another encoding, whose stray bytes mean nothing
    in Latin-1 or CESU-8) replaces every invalid sequence by U+FFFD, still on record.

        >>> mend(b"ok")
        ('ok', [])
        >>> mend(b"don\\x92t \\xa4 \\xe9\\xe8")[0], mend(b"caf\\xe9", guess=False)[0]
        ('don�t � ��', 'caf�')
    """
    runs = _invalid_runs(data)
    if not runs:
        return data.decode("utf-8"), []
    parts: list[str] = []
    mends: list[Mend] = []
    pos = 0
    for s, e in runs:
        parts.append(data[pos:s].decode("utf-8"))
        for m in _read_run(data, s, e, guess):
            parts.append(m.text)
            mends.append(m)
        pos = e
    parts.append(data[pos:].decode("utf-8"))
    return "".join(parts), mends
