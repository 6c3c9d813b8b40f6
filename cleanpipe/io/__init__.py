"""Reading inputs and writing outputs: see :mod:`readers`, :mod:`writers`, :mod:`sources`."""

from cleanpipe.io.readers import BadRecord, Chunk, ReadOptions, iter_batches, read_shard, read_table
from cleanpipe.io.sources import InputError, Shard, resolve_sources
from cleanpipe.io.writers import AtomicDir, OutputError, PartWriter

__all__ = [
    "AtomicDir",
    "BadRecord",
    "Chunk",
    "InputError",
    "OutputError",
    "PartWriter",
    "ReadOptions",
    "Shard",
    "iter_batches",
    "read_shard",
    "read_table",
    "resolve_sources",
]
