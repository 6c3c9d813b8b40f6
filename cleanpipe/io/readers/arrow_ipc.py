"""Arrow IPC (Feather) files and streams."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from cleanpipe.io.filesystems import is_local
from cleanpipe.io.readers.chunks import Chunk, ReadOptions, table_chunks
from cleanpipe.io.readers.opening import random_access
from cleanpipe.io.sources import InputError, Shard


def _open_ipc(shard: Shard) -> Any:
    if is_local(shard.filesystem):
        return pa.memory_map(shard.open_path)
    return random_access(shard)


def read_arrow(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    try:
        source = _open_ipc(shard)
        try:
            table = pa.ipc.open_file(source).read_all()
        except pa.ArrowInvalid:
            source = _open_ipc(shard)
            table = pa.ipc.open_stream(source).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise InputError(f"{shard.path}: not a readable Arrow IPC/Feather file: {e}") from e
    numbers = np.arange(1, table.num_rows + 1, dtype=np.int64)
    yield from table_chunks(table, numbers, shard, [], opts.batch_size, shard.size)
