"""Resolve what a user points at (a file, a directory, a glob, in-memory data) into shards.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "b.jsonl").write_text("{}\\n"); _ = (d / "a.jsonl.gz").write_bytes(b"")
    >>> [(s.name, s.format, s.compression) for s in resolve_sources(str(d))]
    [('a.jsonl.gz', 'jsonl', 'gzip'), ('b.jsonl', 'jsonl', None)]
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMATS = ("jsonl", "json", "parquet", "csv", "tsv", "arrow", "hf", "text")

_EXT = {
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet",
    ".pq": "parquet", ".csv": "csv", ".tsv": "tsv", ".arrow": "arrow", ".feather": "arrow",
    ".ipc": "arrow", ".txt": "text",
}
_COMPRESSION = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}


class InputError(Exception):
    """The input cannot be read (exit code 3). The message names the file and what to do."""


@dataclass(frozen=True)
class Shard:
    """One file (or save_to_disk directory, or in-memory object) to read."""

    path: str | None
    name: str  # relative name used in row ids
    format: str
    compression: str | None = None
    size: int = 0
    obj: Any = None  # in-memory data (Table, DataFrame, datasets.Dataset)


def is_hf_dir(path: Path) -> bool:
    return path.is_dir() and (path / "state.json").exists() and (
        path / "dataset_info.json").exists()


def _detect(path: Path, fmt: str) -> tuple[str, str | None]:
    name = path.name.lower()
    comp = None
    for ext, c in _COMPRESSION.items():
        if name.endswith(ext):
            comp, name = c, name[: -len(ext)]
            break
    if fmt != "auto":
        return fmt, comp
    for ext, f in _EXT.items():
        if name.endswith(ext):
            return f, comp
    raise InputError(
        f"{path}: cannot tell the format from the file name; set input.format to one of"
        f" {', '.join(FORMATS)}"
    )


def _shard(path: Path, root: Path | None, fmt: str) -> Shard:
    name = str(path.relative_to(root)) if root is not None else path.name
    if is_hf_dir(path):
        return Shard(str(path), name or path.name, "hf", None, _dir_size(path))
    f, comp = _detect(path, fmt)
    return Shard(str(path), name, f, comp, path.stat().st_size)


def _dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _skippable(path: Path) -> bool:
    n = path.name
    return n.startswith(".") or n.startswith("_") or n.lower() in {
        "readme.md", "license", "license.md", "license.txt", "provenance.md"}


def resolve_sources(spec: Any, fmt: str = "auto") -> list[Shard]:
    """Shards for a path, directory, glob, list of those, or an in-memory dataset.

    Directory contents are read recursively in sorted order (so row ids and output order are
    stable); hidden files, ``_``-prefixed files and README/LICENSE files are skipped, and with
    ``fmt="auto"`` so are files whose extension names no known format.
    """
    if isinstance(spec, (list, tuple)):
        out: list[Shard] = []
        for s in spec:
            out.extend(resolve_sources(s, fmt))
        return out
    if not isinstance(spec, (str, os.PathLike)):
        return [Shard(None, type(spec).__name__, "memory", obj=spec)]
    text = os.fspath(spec)
    path = Path(text).expanduser()
    if any(ch in text for ch in "*?["):
        matches = sorted(glob.glob(text, recursive=True))
        if not matches:
            raise InputError(f"{text}: the pattern matches no file")
        root = Path(os.path.commonpath([os.path.dirname(m) or "." for m in matches]))
        return [_shard(Path(m), root, fmt) for m in matches if not Path(m).is_dir()
                or is_hf_dir(Path(m))]
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    if is_hf_dir(path):
        return [Shard(str(path), path.name, "hf", None, _dir_size(path))]
    if path.is_dir():
        shards = []
        for p in sorted(path.rglob("*")):
            if p.is_dir() or any(_skippable(Path(part)) for part in p.relative_to(path).parts):
                continue
            if fmt == "auto":
                try:
                    _detect(p, fmt)
                except InputError:
                    continue
            shards.append(_shard(p, path, fmt))
        if not shards:
            raise InputError(f"{path}: the directory holds no readable data file")
        return shards
    return [_shard(path, None, fmt)]
