"""A ``datasets.save_to_disk`` folder: local through ``datasets``, remote with pyarrow alone."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyarrow as pa

from cleanpipe.io.filesystems import is_local, reason
from cleanpipe.io.readers.chunks import Chunk, ReadOptions
from cleanpipe.io.readers.in_memory import read_memory
from cleanpipe.io.sources import InputError, Shard


def read_hf(shard: Shard, opts: ReadOptions) -> Iterator[Chunk]:
    if not is_local(shard.filesystem):
        yield from read_memory(Shard(shard.path, shard.name, "memory",
                                      obj=_remote_hf_table(shard)), opts)
        return
    import datasets

    try:
        ds = datasets.load_from_disk(shard.path)
    except Exception as e:  # datasets raises several kinds; the message is what matters
        raise InputError(f"{shard.path}: not a readable datasets.save_to_disk folder: {e}") from e
    if isinstance(ds, datasets.DatasetDict):
        raise InputError(f"{shard.path}: holds a DatasetDict ({', '.join(ds)}); point at one"
                         " split's folder")
    yield from read_memory(Shard(shard.path, shard.name, "memory", obj=ds), opts)


def _remote_hf_table(shard: Shard) -> pa.Table:
    """A save_to_disk folder on an object store, read with pyarrow alone: ``state.json``
    lists its Arrow stream files in order (``save_to_disk`` has already applied any index
    mapping, so the files hold the rows as they are)."""
    fs, base = shard.filesystem, shard.open_path
    try:
        with fs.open_input_stream(f"{base}/state.json", compression=None) as fh:
            state = json.loads(fh.readall())
        files = [f["filename"] for f in state.get("_data_files", [])]
        tables = []
        for name in files:
            with fs.open_input_stream(f"{base}/{name}", compression=None) as fh:
                tables.append(pa.ipc.open_stream(fh).read_all())
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{shard.path}: not a readable datasets.save_to_disk folder:"
                         f" {reason(e)}") from e
    if state.get("_indices_data_files"):
        raise InputError(f"{shard.path}: a save_to_disk folder with an indices mapping; save it"
                         " again after dataset.flatten_indices()")
    if not tables:
        raise InputError(f"{shard.path}: a save_to_disk folder with no data file")
    return pa.concat_tables(tables, promote_options="default")
