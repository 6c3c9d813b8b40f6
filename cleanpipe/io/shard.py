"""One input to read: a file, a ``datasets.save_to_disk`` folder, or in-memory data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs


@dataclass(frozen=True)
class Shard:
    """One file (or save_to_disk directory, or in-memory object) to read."""

    path: str | None  # where it is, as messages name it: a local path or a URI
    name: str  # relative name used in row ids
    format: str
    compression: str | None = None
    size: int = 0
    obj: Any = None  # in-memory data (Table, DataFrame, datasets.Dataset)
    # a pyarrow FileSystem is not hashable: it stays out of == and hash()
    filesystem: pafs.FileSystem = field(default_factory=pafs.LocalFileSystem, compare=False,
                                        repr=False)
    fs_path: str | None = None  # the path inside ``filesystem`` when it differs from ``path``
    # the shard's bytes when already downloaded (a remote text shard is fetched once for the
    # fingerprint and the reader)
    prefetched: bytes | None = field(default=None, compare=False, repr=False)
    revision: str | None = None  # a Hub dataset's revision (commit), when known

    @property
    def open_path(self) -> str:
        """The path to hand to ``filesystem`` (``bucket/key`` for s3://bucket/key)."""
        path = self.fs_path or self.path
        assert path is not None, "an in-memory shard has no path"
        return path
