"""A line-oriented file (JSON Lines) read in bounded blocks that end at a line boundary.

A big ``train.jsonl`` is then parsed block by block instead of whole, so memory holds a
block and its table, not the file: a file reads like the same rows in many shards. Gzip,
zstd and bz2 files are decompressed as a stream (a compressed file cannot be split by
byte range cheaply, so it is read by one reader, block after block).

Each block carries the 0-based number of lines and of (decompressed) bytes before it, so
the reader numbers lines and byte offsets as in the whole file, and how many bytes of the
file on disk it consumed (for progress).

    >>> import io
    >>> [(b.data, b.lines_before, b.bytes_before)
    ...  for b in line_blocks(io.BytesIO(b"a\\nbb\\nccc\\nd"), block_bytes=4)]
    [(b'a\\n', 0, 0), (b'bb\\n', 1, 2), (b'ccc\\n', 2, 5), (b'd', 3, 9)]
"""

from __future__ import annotations

import bz2
import gzip
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

#: bytes read at a time; each block then ends at the last line break in it. 1 MiB: a
#: block and its table weigh what a small shard's do (bigger blocks parse no faster once
#: the workers are busy, and the allocator keeps what their tables took)
DEFAULT_BLOCK_BYTES = 1 << 20
#: environment variable overriding :data:`DEFAULT_BLOCK_BYTES` (tests use tiny blocks)
BLOCK_ENV = "CLEANPIPE_READ_BLOCK_BYTES"


def block_bytes_from_env() -> int:
    """The block size: ``$CLEANPIPE_READ_BLOCK_BYTES`` when set, else the default.

    >>> block_bytes_from_env() > 0
    True
    """
    value = os.environ.get(BLOCK_ENV)
    return max(1, int(value)) if value else DEFAULT_BLOCK_BYTES


@dataclass
class LineBlock:
    """Whole lines of a file (the last one may lack its line break at the end of the file)."""

    data: bytes
    lines_before: int  # line breaks before the block: its first line is lines_before + 1
    bytes_before: int  # (decompressed) bytes before the block
    raw_bytes: int = 0  # bytes of the file as stored consumed since the previous block
    breaks: int = 0  # line breaks in the block (counted once here: readers need it too)


def decompressing(raw: IO[bytes], compression: str | None) -> IO[bytes]:
    """A stream of ``raw``'s decompressed bytes (``raw`` itself when not compressed)."""
    if compression == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if compression == "zstd":
        import zstandard

        # read_across_frames: a file written in several frames (pzstd, appends) is one text
        return zstandard.ZstdDecompressor().stream_reader(  # type: ignore[return-value]
            raw, read_across_frames=True)
    if compression == "bz2":
        return bz2.BZ2File(raw, mode="rb")  # type: ignore[return-value]
    return raw


def line_blocks(stream: IO[bytes], block_bytes: int = DEFAULT_BLOCK_BYTES,
                raw: Any = None, head: bytes = b"") -> Iterator[LineBlock]:
    """Blocks of about ``block_bytes`` bytes of ``stream``, each ending after a line break
    (a line longer than a block makes its block longer). ``raw``: the file under a
    decompressing ``stream``, whose position measures the stored bytes consumed; ``head``:
    bytes already read from ``stream``."""
    position = raw if raw is not None else stream
    carry = head
    lines = done = consumed = 0
    while True:
        piece = stream.read(block_bytes)
        if not piece:
            break
        data = carry + piece if carry else piece
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            carry = data
            continue
        now = _tell(position)
        block = data[:cut] if cut < len(data) else data
        carry = data[cut:]
        breaks = block.count(b"\n")
        yield LineBlock(block, lines, done, now - consumed, breaks)
        consumed = now
        lines += breaks
        done += len(block)
    if carry:  # the last line, or the head of a file that ended within it
        yield LineBlock(carry, lines, done, _tell(position) - consumed, carry.count(b"\n"))


def _tell(f: Any) -> int:
    try:
        return int(f.tell())
    except (OSError, ValueError, io.UnsupportedOperation):
        return 0
