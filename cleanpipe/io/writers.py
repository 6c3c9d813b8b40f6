"""Write the cleaned dataset and the quarantine, and commit the output directory atomically.

Layout of an output directory::

    OUT/
      data/train-00000-of-00001.parquet   cleaned rows (or .jsonl; or a save_to_disk folder)
      quarantine/quarantine-00000-of-00001.parquet   dropped rows as read + row id + reasons
      events.parquet                       every change/drop/flag: row id, stage, code, detail
      report.json, report.md, ...
      README.md                            dataset card, so datasets.load_dataset(OUT) works
      _SUCCESS                             a folder without it is not complete
      _cleanpipe.json                      written last: says cleanpipe wrote the folder and
                                           lists its files (what ``--overwrite`` may replace)

Everything is written into a hidden sibling ``.OUT.tmp-<pid>-<tag>`` and swapped into place
at the end, so a run killed midway leaves nothing that looks complete.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from cleanpipe.fault_points import pause_point
from cleanpipe.io.errors import OutputError
from cleanpipe.io.features_yaml import features_yaml
from cleanpipe.io.output_guard import (
    MANIFEST,
    check_replaceable,
    foreign_files,
    is_cleanpipe_folder,
    manifest_text,
    write_manifest,
)
from cleanpipe.io.row_bytes import row_bytes
from cleanpipe.io.run_lock import OutputLock
from cleanpipe.io.schemas import cast_batch, unify_schemas

#: a Parquet row group closes at this many rows ...
GROUP_ROWS = 65_536
#: ... or once its rows hold this many bytes (:func:`cleanpipe.io.row_bytes.row_bytes`).
#: Writing a group holds about twice this (its rows, then their copy in one chunk, and the
#: encoded pages), for each open writer (data, quarantine, events): at 32 MB the t0 run's
#: main process held ~25 MB more through its last pass, and peaked there
GROUP_BYTES = 16 << 20


class RowGroups:
    """Rows waiting for their Parquet row group, which closes at ``rows`` rows or once it
    holds ``max_bytes``, whichever comes first.

    Both limits are applied row by row, so the groups (and so a file's bytes) depend on the
    rows alone, not on the batch size or on how the input was chunked; and memory holds
    about one group, which for long documents is far less than ``rows`` rows.

        >>> groups = RowGroups(pa.schema([("t", pa.string())]), rows=3, max_bytes=20)
        >>> groups.add(pa.table({"t": ["a", "b", "a long line of text", "c"]}))
        >>> [g.num_rows for g in groups.full(final=False)], groups.rows
        ([3], 1)
        >>> [g.num_rows for g in groups.full(final=True)]
        [1]
    """

    def __init__(self, schema: pa.Schema, rows: int = GROUP_ROWS,
                 max_bytes: int = GROUP_BYTES) -> None:
        self.schema = schema
        self.max_rows = rows
        self.max_bytes = max_bytes
        self._tables: list[pa.Table] = []
        self._sizes: list[np.ndarray] = []
        self._bytes = 0
        self.rows = 0

    def add(self, data: pa.Table | pa.RecordBatch) -> None:
        table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
        if not table.schema.equals(self.schema):
            table = table.cast(self.schema)
        self._tables.append(table)
        sizes = row_bytes(table)
        self._sizes.append(sizes)
        self._bytes += int(sizes.sum())
        self.rows += table.num_rows

    def full(self, final: bool) -> Iterator[pa.Table]:
        """The groups that are complete (and, when ``final``, the rest as the last one), each
        in one chunk: Parquet pages follow chunks, and chunks follow batches.

        The batches a group is copied from are let go before it is yielded (all but one the
        rest is still in), so writing a group (up to 16 MB of rows, and its encoded pages)
        does not also hold the batches it was copied from.
        """
        while self.rows:
            if not final and self.rows < self.max_rows and self._bytes < self.max_bytes:
                return  # no group can be complete yet: skip the row-by-row search
            sizes = np.concatenate(self._sizes)
            # the row that reaches max_bytes closes its group
            by_bytes = int(np.searchsorted(np.cumsum(sizes), self.max_bytes)) + 1
            n = min(self.max_rows, by_bytes)
            if n > self.rows:
                if not final:
                    return
                n = self.rows
            table = pa.concat_tables(self._tables)
            rest = table.slice(n)
            self._tables = [rest] if rest.num_rows else []
            self._sizes = [sizes[n:]] if rest.num_rows else []
            self._bytes = int(sizes[n:].sum())
            self.rows = rest.num_rows
            group = table.slice(0, n).combine_chunks()
            del table, rest  # the copied batches, but those the rest is still in
            yield group


def _write_jsonl(table: pa.Table, path: Path) -> None:
    import polars as pl

    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    df.write_ndjson(path)


class PartWriter:
    """Rows of possibly different schemas → parts of one unified schema.

    Batches are appended to the current part until its schema would change or it holds
    ``rows_per_part`` rows. ``close`` unifies the parts' schemas (losslessly) and rewrites
    the parts that differ, then names them ``PREFIX-00000-of-0000N.EXT``.
    """

    def __init__(self, directory: Path, prefix: str, fmt: str = "parquet",
                 rows_per_part: int = 1_000_000, compression: str = "zstd",
                 row_group_rows: int = GROUP_ROWS, row_group_bytes: int = GROUP_BYTES) -> None:
        self.dir = directory
        self.prefix = prefix
        self.fmt = fmt
        self.rows_per_part = rows_per_part
        self.compression = compression
        self.parts: list[tuple[Path, pa.Schema, str]] = []
        self._writer: pq.ParquetWriter | None = None
        self._schema: pa.Schema | None = None
        self._rows = 0
        self.rows = 0
        self.row_group_rows = min(row_group_rows, rows_per_part)
        self.row_group_bytes = row_group_bytes
        self._pending: RowGroups | None = None

    def _part_path(self, i: int) -> Path:
        return self.dir / f".part-{i:05d}.parquet"

    def _open(self, schema: pa.Schema, source: str) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self._part_path(len(self.parts))
        self._writer = pq.ParquetWriter(path, schema, compression=self.compression)
        self._schema = schema
        self._rows = 0
        self._pending = RowGroups(schema, self.row_group_rows, self.row_group_bytes)
        self.parts.append((path, schema, source))

    def _flush(self, final: bool) -> None:
        assert self._writer is not None and self._pending is not None
        for group in self._pending.full(final):
            self._writer.write_table(group, row_group_size=group.num_rows)

    def _close_current(self) -> None:
        if self._writer is not None:
            self._flush(final=True)
            self._writer.close()
            self._writer = None

    def write(self, batch: pa.RecordBatch, source: str = "") -> None:
        if batch.num_rows == 0:
            return
        if self._schema is not None and not batch.schema.equals(self._schema):
            try:
                merged = unify_schemas([("", self._schema), (source, batch.schema)])
            except Exception:
                merged = None
            if merged is not None and merged.equals(self._schema):
                batch = cast_batch(batch, self._schema)
        if (self._writer is None or not batch.schema.equals(self._schema)
                or self._rows >= self.rows_per_part):
            self._close_current()
            self._open(batch.schema, source)
        assert self._writer is not None
        room = self.rows_per_part - self._rows
        if batch.num_rows > room:
            head, tail = batch.slice(0, room), batch.slice(room)
            self.write(head, source)
            self.write(tail, source)
            return
        assert self._pending is not None
        self._pending.add(batch)
        self._rows += batch.num_rows
        self.rows += batch.num_rows
        self._flush(final=False)

    def close(self, empty_schema: pa.Schema | None = None) -> list[Path]:
        """Finish the parts; returns their final paths."""
        self._close_current()
        if not self.parts:
            # an empty result is still a dataset: one empty part with the input's schema
            self._open(empty_schema if empty_schema is not None else pa.schema([]), "")
            self._close_current()
        schema = unify_schemas([(src or str(p), s) for p, s, src in self.parts])
        for path, s, _ in self.parts:
            if not s.equals(schema):
                table = pq.read_table(path)
                table = pa.Table.from_batches(
                    [cast_batch(b, schema) for b in table.to_batches()], schema=schema)
                pq.write_table(table, path, compression=self.compression)
        n = len(self.parts)
        final = []
        ext = "jsonl" if self.fmt == "jsonl" else "parquet"
        for i, (path, _, _) in enumerate(self.parts):
            target = self.dir / f"{self.prefix}-{i:05d}-of-{n:05d}.{ext}"
            if self.fmt == "jsonl":
                _write_jsonl(pq.read_table(path), target)
                path.unlink()
            else:
                path.rename(target)
            final.append(target)
        self.schema = schema
        return final


class FixedGroupWriter:
    """A Parquet file written in row groups that depend on the rows alone (see
    :class:`RowGroups`), not on the batch size or the worker count."""

    def __init__(self, path: Path, schema: pa.Schema, group_rows: int = GROUP_ROWS,
                 compression: str = "zstd", group_bytes: int = GROUP_BYTES) -> None:
        self._writer = pq.ParquetWriter(path, schema, compression=compression)
        self._pending = RowGroups(schema, group_rows, group_bytes)

    def write_table(self, table: pa.Table) -> None:
        self._pending.add(table)
        self._flush(final=False)

    def _flush(self, final: bool) -> None:
        for group in self._pending.full(final):
            self._writer.write_table(group, row_group_size=group.num_rows)

    def close(self) -> None:
        self._flush(final=True)
        self._writer.close()


def write_hf_dataset(parquet_parts: list[Path], target: Path) -> None:
    """Turn finished Parquet parts into a ``datasets.save_to_disk`` folder at ``target``."""
    import datasets

    files = [str(p) for p in parquet_parts]
    table = pa.concat_tables([pq.read_table(f) for f in files]) if files else pa.table({})
    if table.num_rows == 0:
        # datasets needs at least one (empty) chunk per column to build a dataset
        table = pa.Table.from_batches([pa.RecordBatch.from_pylist([], schema=table.schema)])
    ds = datasets.Dataset(table)
    ds.save_to_disk(str(target))


def dataset_card(data_glob: str, quarantine_glob: str, data_schema: pa.Schema | None = None,
                 quarantine_schema: pa.Schema | None = None) -> str:
    """README.md whose YAML header tells ``datasets.load_dataset(OUT)`` which files are which.

    With the schemas, the header also declares each config's features: datasets cannot infer
    them from a file with no rows, and an empty result must still load.
    """
    import yaml

    configs = [
        {"config_name": "default", "data_files": [{"split": "train", "path": data_glob}]},
        {"config_name": "quarantine",
         "data_files": [{"split": "train", "path": quarantine_glob}]},
    ]
    header: dict[str, Any] = {"configs": configs}
    info = []
    for name, schema in (("default", data_schema), ("quarantine", quarantine_schema)):
        features = _features_yaml(schema)
        if features is not None:
            info.append({"config_name": name, "features": features})
    if info:
        header["dataset_info"] = info
    # safe_dump: column names come from the data and are quoted as needed, never evaluated
    head = yaml.safe_dump(header, sort_keys=False, allow_unicode=True)
    return (
        f"---\n{head}---\n\n"
        "# Cleaned by cleanpipe\n\n`data/` holds the cleaned rows; `quarantine/` the rows that"
        " were removed, each with its row id and reasons; `report.json` says what happened.\n"
    )


def _features_yaml(schema: pa.Schema | None) -> list[dict[str, Any]] | None:
    if schema is None or not len(schema):
        return None
    try:
        features = features_yaml(schema)  # without importing datasets, where it can
        if features is not None:
            return features
        import datasets

        return datasets.Features.from_arrow_schema(schema)._to_yaml_list()
    except Exception:  # a type datasets has no feature for: let it infer from the rows
        return None


class AtomicDir:
    """A directory written under a temporary name and swapped into place on commit.

    For the whole ``with`` block the output is locked (:class:`~cleanpipe.io.run_lock.
    OutputLock`): a second run into it is refused, naming this one's PID. An existing
    folder is replaced only with ``overwrite`` and only when cleanpipe wrote it
    (:mod:`cleanpipe.io.output_guard`). The temporary folder ``.NAME.tmp-<pid>-<tag>`` holds
    the manifest from its creation, so the next run into the same output can tell it is
    ours, and reclaims it once its owner is gone.
    """

    def __init__(self, target: Path, overwrite: bool = False) -> None:
        # absolute: "." has no name to hide a sibling under, and cannot be renamed
        self.target = Path(os.path.abspath(target))
        self.overwrite = overwrite
        tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.tmp = self.target.parent / f".{self.target.name}.tmp-{tag}"
        self._lock = OutputLock(self.target)

    def check(self) -> None:
        """Fail early, before any work, if the target cannot be used."""
        parent = self.target.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OutputError(f"{parent}: cannot create the output's parent folder: "
                              f"{e.strerror or e}") from e
        if not os.access(parent, os.W_OK):
            raise OutputError(f"{parent}: not writable; choose another --output")
        self._check_target()

    def _check_target(self) -> None:
        if self.target.is_symlink() or (self.target.exists() and not self.target.is_dir()):
            raise OutputError(f"{self.target}: exists and is not a directory")
        if not self.target.exists():
            return
        if not self.overwrite:
            if foreign_files(self.target):
                check_replaceable(self.target)  # says why it could never be replaced
            raise OutputError(f"{self.target}: already exists; pass --overwrite to replace it")
        check_replaceable(self.target)

    def _clean_stale(self) -> None:
        """Reclaim the temporary folders of killed runs into this output: ours (by name and
        manifest), and their owner gone (this run holds the lock, and their PID is dead).
        An old output that a killed commit had moved aside is put back if nothing replaced
        it."""
        name = self.target.name
        for p in sorted(self.target.parent.iterdir()):
            if not p.name.startswith(f".{name}."):
                continue
            kind, _, rest = p.name[len(name) + 2:].partition("-")
            if kind not in ("tmp", "old") or not p.is_dir() or p.is_symlink():
                continue
            try:
                pid = int(rest.split("-")[0])
            except ValueError:
                continue
            if pid == os.getpid() or _alive(pid):
                continue
            # a temporary folder holds only what its run wrote, listed or not (yet); an old
            # output moved aside must be complete and untouched
            if not (is_cleanpipe_folder(p) if kind == "tmp" else not foreign_files(p)):
                continue
            if kind == "old" and not self.target.exists():
                p.rename(self.target)
            else:
                shutil.rmtree(p, ignore_errors=True)

    def __enter__(self) -> Path:
        self.check()
        self._lock.acquire()
        try:
            self._clean_stale()
            self._check_target()  # again: a reclaimed old output may be back in place
            try:
                self.tmp.mkdir(parents=True)
                (self.tmp / MANIFEST).write_text(
                    manifest_text([], state="writing", pid=os.getpid()), encoding="utf-8")
            except OSError as e:
                raise OutputError(f"{self.tmp}: cannot create: {e.strerror or e}") from e
        except BaseException:
            self.abort()
            raise
        return self.tmp

    def commit(self) -> None:
        (self.tmp / "_SUCCESS").write_text("")
        write_manifest(self.tmp)
        pause_point("commit")
        if not self.target.exists():
            self.tmp.rename(self.target)
            return
        if not self.overwrite:  # appeared during the run (not by cleanpipe: we hold the lock)
            raise OutputError(f"{self.target}: appeared during the run; pass --overwrite to"
                              " replace it")
        check_replaceable(self.target)  # files added to it during the run stay the user's
        if exchange(self.tmp, self.target):
            # one atomic step: the target is the old output or the new one, never neither
            pause_point("swapped")
            shutil.rmtree(self.tmp, ignore_errors=True)  # the old output now
            return
        old = self.target.parent / f".{self.target.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.target.rename(old)  # a kill right here is undone by the next run's _clean_stale
        self.tmp.rename(self.target)
        shutil.rmtree(old, ignore_errors=True)

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
        self._lock.release()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.abort()
        self._lock.release()


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange(a: Path, b: Path) -> bool:
    """Swap two folders atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False where the
    system or filesystem cannot, and nothing was changed."""
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), os.fspath(b))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
