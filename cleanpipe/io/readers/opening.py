"""A shard's stored bytes: streamed in blocks, read whole (decompressed), or opened for
random access (Parquet, Arrow IPC), local or remote; a failure names the file."""

from __future__ import annotations

import bz2
import gzip
import io
from typing import Any

from cleanpipe.io.filesystems import is_local, read_bytes, reason
from cleanpipe.io.sources import InputError, Shard


def open_stream(shard: Shard) -> Any:
    """The shard's stored bytes as a binary file object (to read in blocks)."""
    if shard.prefetched is not None:
        return io.BytesIO(shard.prefetched)
    try:
        if is_local(shard.filesystem):
            return open(shard.open_path, "rb")
        return shard.filesystem.open_input_stream(shard.open_path, compression=None)
    except OSError as e:
        raise InputError(f"{shard.path}: cannot read: {reason(e)}") from e


def open_bytes(shard: Shard) -> bytes:
    try:
        raw = (shard.prefetched if shard.prefetched is not None
               else read_bytes(shard.filesystem, shard.open_path))
    except OSError as e:
        raise InputError(f"{shard.path}: cannot read: {reason(e)}") from e
    try:
        if shard.compression == "gzip":
            return gzip.decompress(raw) if raw else raw
        if shard.compression == "zstd":
            import zstandard

            if not raw:
                return raw
            return zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)).read()
        if shard.compression == "bz2":
            return bz2.decompress(raw)
    except Exception as e:  # corrupt archive: name the file, not the codec internals
        raise InputError(f"{shard.path}: cannot decompress ({shard.compression}): {e}") from e
    return raw


def random_access(shard: Shard) -> Any:
    """What pyarrow's Parquet/IPC readers open: the local path, or a seekable remote file
    (Parquet then fetches the footer and the row groups it reads, not the whole object)."""
    if is_local(shard.filesystem):
        return shard.open_path
    try:
        return shard.filesystem.open_input_file(shard.open_path)
    except OSError as e:
        raise InputError(f"{shard.path}: cannot read: {reason(e)}") from e
