"""Resolve what a user points at (a file, a directory, a glob, a URI, in-memory data) into shards.

A URI (``s3://bucket/sft/``, ``gs://...``, ``file:///data/sft/``, with or without a glob)
is listed through its pyarrow filesystem with the same rules as a local folder, so the same
tree gives the same shards, in the same order, with the same row ids wherever it lives.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "b.jsonl").write_text("{}\\n"); _ = (d / "a.jsonl.gz").write_bytes(b"")
    >>> [(s.name, s.format, s.compression) for s in resolve_sources(str(d))]
    [('a.jsonl.gz', 'jsonl', 'gzip'), ('b.jsonl', 'jsonl', None)]
"""

from __future__ import annotations

import glob
import os
import posixpath
import re
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow.fs as pafs

from cleanpipe.io.errors import InputError
from cleanpipe.io.filesystems import (
    filesystem_for,
    glob_regex,
    is_uri,
    missing,
    reason,
    shown_uri,
    sorted_files,
)
from cleanpipe.io.hub import hub_hint, hub_shards, parse_hub
from cleanpipe.io.shard import Shard

FORMATS = ("jsonl", "json", "parquet", "csv", "tsv", "arrow", "hf", "text")
#: formats whose readers take the whole file's bytes (the others seek into it)
WHOLE_FILE_FORMATS = ("jsonl", "json", "csv", "tsv", "text")

_EXT = {
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet",
    ".pq": "parquet", ".csv": "csv", ".tsv": "tsv", ".arrow": "arrow", ".feather": "arrow",
    ".ipc": "arrow", ".txt": "text",
}
_COMPRESSION = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd"}


def is_hf_dir(path: Path) -> bool:
    return path.is_dir() and (path / "state.json").exists() and (
        path / "dataset_info.json").exists()


def _detect(path: Path | PurePosixPath, fmt: str, shown: str | None = None
            ) -> tuple[str, str | None]:
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
        f"{shown or path}: cannot tell the format from the file name; set input.format to one of"
        f" {', '.join(FORMATS)}"
    )


def _shard(path: Path, root: Path | None, fmt: str) -> Shard:
    name = str(path.relative_to(root)) if root is not None else path.name
    if is_hf_dir(path):
        return Shard(str(path), name or path.name, "hf", None, _dir_size(path))
    f, comp = _detect(path, fmt)
    try:
        size = path.stat().st_size
    except OSError as e:
        raise InputError(_unreadable(path, e)) from e
    return Shard(str(path), name, f, comp, size)


def _unreadable(path: Path, e: OSError | None = None) -> str:
    """One line naming ``path`` and why it cannot be read (``e``, or: it is not there); a
    broken symbolic link says where it points, since ``[Errno 2]`` on a path that is listed
    right there puzzles anyone."""
    if path.is_symlink() and not path.exists():
        return (f"{path}: a symbolic link to {os.readlink(path)}, which does not exist; fix"
                " or remove the link")
    return f"{path}: cannot read: {reason(e)}" if e else f"{path}: no such file or directory"


def _tree(root: Path) -> list[Path]:
    """Every file and folder under ``root`` in :meth:`Path.rglob`'s sorted order, but with
    symbolically linked folders followed (their files are data like any other) and skipped
    names (:func:`_skippable`) not entered.

    A folder that cannot be listed is an :class:`InputError` naming it (``rglob`` skips it
    silently, losing its rows), and so is a link that leads back to a folder it is inside
    (a loop would list the same files without end).
    """
    out: list[Path] = []
    try:
        top = root.stat()
    except OSError as e:
        raise InputError(_unreadable(root, e)) from e
    stack: list[tuple[Path, tuple[tuple[int, int], ...]]] = [(root, ((top.st_dev, top.st_ino),))]
    while stack:
        folder, chain = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError as e:
            raise InputError(f"{folder}: cannot list the input folder: {reason(e)}") from e
        for entry in entries:
            p = Path(entry.path)
            if _skippable(p):
                continue
            out.append(p)
            try:
                st = p.stat() if entry.is_dir() else None
            except OSError:
                st = None  # not a folder we can enter: read as a file, which names the cause
            if st is None:
                continue
            key = (st.st_dev, st.st_ino)
            if key in chain:
                raise InputError(f"{p}: a symbolic link loop: it leads back to"
                                 f" {os.path.realpath(p)}, a folder it is inside; remove the"
                                 " link")
            stack.append((p, (*chain, key)))
    return sorted(out)


def _dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _skippable(path: Path | PurePosixPath) -> bool:
    n = path.name
    return n.startswith(".") or n.startswith("_") or n.lower() in {
        "readme.md", "license", "license.md", "license.txt", "provenance.md"}


def resolve_sources(spec: Any, fmt: str = "auto") -> list[Shard]:
    """Shards for a path, directory, glob, list of those, or an in-memory dataset.

    Directory contents are read recursively in sorted order (so row ids and output order are
    stable); hidden files, ``_``-prefixed files and README/LICENSE files are skipped, and with
    ``fmt="auto"`` so are files whose extension names no known format. Symbolically linked
    folders are followed (a loop is an error); a folder that cannot be listed, or a link to
    nothing, is an :class:`InputError` naming it, never a silent skip. A URI is listed the
    same way on its filesystem (:func:`resolve_uri`); a ``hub:ORG/NAME[:CONFIG][@SPLIT]`` name
    streams a Hugging Face dataset (:mod:`cleanpipe.io.hub`).
    """
    if isinstance(spec, (list, tuple)):
        out: list[Shard] = []
        for s in spec:
            out.extend(resolve_sources(s, fmt))
        return out
    if not isinstance(spec, (str, os.PathLike)):
        return [Shard(None, type(spec).__name__, "memory", obj=spec)]
    text = os.fspath(spec)
    if (hub := parse_hub(text)) is not None:
        return hub_shards(hub, text)
    if (hint := hub_hint(text)) is not None:
        raise InputError(hint)
    if is_uri(text):
        return resolve_uri(text, fmt)
    path = Path(text).expanduser()
    if any(ch in text for ch in "*?["):
        matches = sorted(glob.glob(text, recursive=True))
        if not matches:
            raise InputError(f"{text}: the pattern matches no file")
        root = Path(os.path.commonpath([os.path.dirname(m) or "." for m in matches]))
        return [_shard(Path(m), root, fmt) for m in matches if not Path(m).is_dir()
                or is_hf_dir(Path(m))]
    try:
        if not path.exists():
            raise InputError(_unreadable(path))
        is_hf, is_dir = is_hf_dir(path), path.is_dir()
    except OSError as e:  # a parent folder we may not enter
        raise InputError(_unreadable(path, e)) from e
    if is_hf:
        return [Shard(str(path), path.name, "hf", None, _dir_size(path))]
    if is_dir:
        shards = []
        hf_roots: list[Path] = []
        for p in _tree(path):
            if any(r in p.parents for r in hf_roots):
                continue
            if p.is_dir():
                # a save_to_disk folder inside the folder is one shard, not its files
                if is_hf_dir(p):
                    hf_roots.append(p)
                    shards.append(_shard(p, path, fmt))
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


def resolve_uri(uri: str, fmt: str = "auto") -> list[Shard]:
    """Shards of a URI: one file, a folder (every file under it, recursively) or a glob.

    Files are ordered and named exactly as for the same tree on a local disk (a folder: by
    path components, named relative to the folder; a glob: sorted as strings, named relative
    to the deepest folder common to the matches), so moving a corpus from a disk to a bucket
    keeps its row ids. Listing errors (no bucket, no credentials) are one line naming the URI.

        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "b.jsonl").write_text("{}\\n"); (d / "s").mkdir()
        >>> _ = (d / "s" / "a.csv").write_text("x\\n1\\n")
        >>> [(s.name, s.format) for s in resolve_uri(d.as_uri() + "/")]
        [('b.jsonl', 'jsonl'), ('s/a.csv', 'csv')]
        >>> [s.name for s in resolve_uri(d.as_uri() + "/**/*.csv")]
        ['a.csv']
    """
    fs, path = filesystem_for(uri, InputError)
    shown = shown_uri(uri, path)
    parts = path.split("/")
    wild = next((i for i, p in enumerate(parts) if any(ch in p for ch in "*?[")), None)
    base = "/".join(parts[:wild]) if wild is not None else path
    try:
        info = fs.get_file_info(base)
        if wild is None and info.type == pafs.FileType.File:
            return [_uri_shard(fs, uri, info, PurePosixPath(info.path).name, fmt)]
        if info.type != pafs.FileType.Directory:
            raise InputError(f"{shown}: {missing(fs, base)}")
        files = sorted_files(fs, base)
    except OSError as e:
        raise InputError(f"{shown}: cannot list: {reason(e)}") from e
    rel = {i.path: i.path[len(base):].lstrip("/") for i in files}
    names = set(rel.values())
    # a datasets.save_to_disk folder is one shard: the folder holding state.json and
    # dataset_info.json ("." when the URI itself is one)
    hf_dirs = sorted(str(PurePosixPath(r).parent) for r in names
                     if PurePosixPath(r).name == "state.json"
                     and str(PurePosixPath(r).parent / "dataset_info.json") in names)
    if "." in hf_dirs:  # the URI itself is a save_to_disk folder
        return [_hf_shard(fs, uri, base, PurePosixPath(base).name, files)]
    pattern = glob_regex("/".join(parts[wild:])) if wild is not None else None
    shards: list[Shard] = []
    done_hf: set[str] = set()
    for i in files:
        r = rel[i.path]
        if pattern is None and any(_skippable(PurePosixPath(p)) for p in r.split("/")):
            continue
        hf = next((d for d in hf_dirs if r.startswith(d + "/")), None)
        if hf is not None:
            if hf not in done_hf and (pattern is None or pattern.fullmatch(hf)):
                done_hf.add(hf)
                shards.append(_hf_shard(fs, uri, f"{base}/{hf}", hf,
                                        [f for f in files if rel[f.path].startswith(hf + "/")]))
            continue
        if pattern is not None and (not pattern.fullmatch(r) or _hidden_for_glob(r, pattern)):
            continue
        if fmt == "auto" and pattern is None:
            try:
                _detect(PurePosixPath(r), fmt)
            except InputError:
                continue
        shards.append(_uri_shard(fs, uri, i, r, fmt))
    if not shards:
        what = "the pattern matches no file" if pattern is not None else (
            "the folder holds no readable data file")
        raise InputError(f"{shown}: {what}")
    return _as_local_glob(shards) if pattern is not None else shards


def _hidden_for_glob(rel: str, pattern: re.Pattern[str]) -> bool:
    """Like :func:`glob.glob`: wildcards do not match a leading dot unless the pattern
    spells one out."""
    return any(p.startswith(".") for p in rel.split("/")) and "/." not in (
        "/" + pattern.pattern.replace("\\.", "."))


def _as_local_glob(shards: list[Shard]) -> list[Shard]:
    """Glob matches ordered and named as a local glob orders and names them: sorted as
    strings, named relative to the deepest folder common to all matches."""
    shards = sorted(shards, key=lambda s: s.open_path)
    root = posixpath.commonpath([posixpath.dirname(s.open_path) for s in shards])
    return [replace(s, name=posixpath.relpath(s.open_path, root)) for s in shards]


def _uri_shard(fs: pafs.FileSystem, uri: str, info: pafs.FileInfo, name: str,
               fmt: str) -> Shard:
    shown = shown_uri(uri, info.path)
    f, comp = _detect(PurePosixPath(info.path), fmt, shown)
    return Shard(shown, name, f, comp, info.size or 0, filesystem=fs, fs_path=info.path)


def _hf_shard(fs: pafs.FileSystem, uri: str, path: str, name: str,
              files: list[pafs.FileInfo]) -> Shard:
    return Shard(shown_uri(uri, path), name, "hf", None, sum(f.size or 0 for f in files),
                 filesystem=fs, fs_path=path)
