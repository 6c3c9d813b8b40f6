"""Input bytes as UTF-8: transcoding from ``input.encoding``, finding invalid sequences by
byte offset and line, and reading them by ``input.on_decode_error``."""

from __future__ import annotations

import codecs

import numpy as np

from cleanpipe.io.readers.chunks import BadRecord, Notes, ReadOptions
from cleanpipe.io.sources import InputError, Shard
from cleanpipe.io.utf8_repair import invalid_ranges, mend

#: more invalid bytes than this share of a file means it is not UTF-8 with a few bad
#: sequences but another encoding altogether: say so instead of replacing half the text
NOT_UTF8_SHARE = 0.005


NOT_UTF8_MIN = 64


_GUESS_ENCODINGS = ("gb18030", "big5", "shift_jis", "euc-kr", "cp1252")


def _bad_utf8_bytes(data: bytes) -> np.ndarray:
    """Offset of every byte that is part of an invalid UTF-8 sequence (ascending)."""
    ranges = invalid_ranges(data)
    if not ranges:
        return np.zeros(0, np.int64)
    return np.concatenate([np.arange(s, e, dtype=np.int64) for s, e in ranges])


def line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def _guess_encoding(data: bytes) -> str | None:
    sample = data[: 1 << 20]
    for enc in _GUESS_ENCODINGS:
        try:
            sample.decode(enc)
        except UnicodeDecodeError as e:
            if e.start < len(sample) - 4:  # a cut multi-byte character at the end is fine
                continue
        return enc
    return None


def decode_to_utf8(shard: Shard, data: bytes, opts: ReadOptions, line_base: int = 0,
                    byte_base: int = 0, first: bool = True
                    ) -> tuple[bytes, np.ndarray, bool]:
    """UTF-8 bytes of ``data``, the offset of every byte of an invalid sequence, and whether
    the file is UTF-8 (so its invalid bytes may be read by :mod:`utf8_repair`'s rule).

    A BOM is removed (UTF-8; UTF-16/32 BOMs also select that encoding). Other encodings
    (``input.encoding``) are transcoded first, bytes that are not valid in them kept as
    invalid UTF-8 bytes, so each reader replaces them per record, with an event;
    ``on_decode_error: fail`` names the line and byte offset of the first bad sequence, in
    the file as it is on disk. For a block of a file (:mod:`line_blocks`), ``line_base``
    and ``byte_base`` count the lines and bytes before it, and ``first`` says whether it
    starts the file (only a file's start holds a BOM and shows whether it is UTF-8 at all).
    """
    enc = codecs.lookup(opts.encoding).name if known_encoding(opts.encoding) else None
    if enc is None:
        raise InputError(f"{shard.path}: unknown encoding {opts.encoding!r} (input.encoding);"
                         " use a Python codec name such as utf-8, gb18030, gbk, utf-16")
    if first and enc == "utf-8" and data.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        enc = "utf-32"
    elif first and enc == "utf-8" and data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        enc = "utf-16"
    if enc == "utf-8":
        if first and data.startswith(codecs.BOM_UTF8):
            data = data[3:]
        bad = _bad_utf8_bytes(data)
        if bad.size == 0:
            return data, bad, True
        at = int(bad[0])
        where = f"{shard.path}:{line_base + line_of(data, at)}"
        if first and bad.size > max(NOT_UTF8_MIN, NOT_UTF8_SHARE * len(data)):
            guess = _guess_encoding(data)
            hint = f"it looks like {guess}: set input.encoding: {guess}" if guess else (
                "set input.encoding to the file's encoding (e.g. gb18030, gbk, utf-16)")
            raise InputError(f"{where}: not UTF-8 ({bad.size:,} invalid bytes, the first at"
                             f" byte offset {byte_base + at}); {hint}")
        if opts.on_decode_error == "fail":
            raise InputError(
                f"{where}: invalid UTF-8 at byte offset {byte_base + at}; if the file is in"
                " another encoding set input.encoding (e.g. gb18030, utf-16), or set"
                " input.on_decode_error to replace or quarantine")
        return data, bad, True
    try:
        text = data.decode(enc)
    except UnicodeDecodeError as e:
        if opts.on_decode_error == "fail":
            raise InputError(f"{shard.path}:{line_of(data, e.start)}: not valid {enc} at byte"
                             f" offset {e.start}; check input.encoding, or set"
                             " input.on_decode_error to replace or quarantine") from None
        # the bad bytes are marked as lone surrogates, which the UTF-8 encoding below turns
        # back into invalid bytes: each reader then replaces (with an event) or quarantines
        # the records holding them
        text = data.decode(enc, errors="surrogateescape")
    text = text.removeprefix("\ufeff")
    out = text.encode("utf-8", errors="surrogateescape")
    return out, _bad_utf8_bytes(out), False


def known_encoding(encoding: str) -> bool:
    try:
        codecs.lookup(encoding)
    except LookupError:
        return False
    return True


def line_numbers(data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start offset, end offset and 1-based number of every non-blank line."""
    buf = np.frombuffer(data, dtype=np.uint8)
    nl = np.flatnonzero(buf == 10)
    starts = np.concatenate(([0], nl + 1))
    ends = np.concatenate((nl, [len(buf)]))
    ws = (buf == 32) | (buf == 9) | (buf == 13) | (buf == 10)
    content = np.concatenate(([0], np.cumsum(~ws, dtype=np.int64)))
    nonblank = content[ends] - content[starts] > 0
    numbers = np.flatnonzero(nonblank) + 1
    return starts[nonblank], ends[nonblank], numbers


def first_bad_in(bad: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each [start, end) span, the first bad byte offset inside it, or -1."""
    if bad.size == 0:
        return np.full(starts.size, -1, np.int64)
    i = np.searchsorted(bad, starts, side="left")
    cand = bad[np.minimum(i, bad.size - 1)]
    return np.where((i < bad.size) & (cand < ends), cand, -1)


def mend_line(line: bytes, num: int, start: int, guess: bool, notes: Notes) -> str:
    """A line's text with its invalid bytes read (:func:`mend`), each change noted."""
    text, mends = mend(line, guess)
    notes[num] = [(m.code, m.describe(f"line {num}, byte offset {start + m.offset}" if guess
                                      else f"line {num}")) for m in mends]
    return text


def decode_bad(shard: Shard, line: bytes, num: int, off: int) -> BadRecord:
    return BadRecord(shard.name, num, "decode_error",
                     f"invalid UTF-8 at line {num}, byte offset {off}",
                     line.decode("utf-8", errors="replace"), off)
