"""An output directory on any pyarrow filesystem (``s3://``, ``gs://``), committed safely.

Object stores cannot rename a folder, so :class:`AtomicDir`'s temporary-folder-then-rename
does not carry over. :class:`UriDir` keeps its promise another way:

1. the run writes into a local staging folder (the writers need seekable local files);
2. ``commit`` uploads it under a hidden sibling prefix ``.NAME.tmp-<tag>/``: the slow,
   failure-prone part, done while an old output (``--overwrite``) is still intact;
3. the old output is removed (its ``_SUCCESS`` first) and every file is moved into place
   (server-side copies on S3/GCS);
4. ``_SUCCESS`` is written last. A folder without it is not complete: readers must check it.

    >>> import tempfile, pyarrow.fs as pafs
    >>> root = tempfile.mkdtemp()
    >>> out = UriDir(pafs.LocalFileSystem(), f"{root}/out", f"file://{root}/out")
    >>> with out as tmp:
    ...     _ = (tmp / "report.json").write_text("{}")
    ...     out.commit()
    >>> sorted(i.base_name for i in pafs.LocalFileSystem().get_file_info(
    ...     pafs.FileSelector(f"{root}/out")))
    ['_SUCCESS', '_cleanpipe.json', 'report.json']
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow.fs as pafs

from cleanpipe.io.filesystems import (
    filesystem_for,
    is_local,
    is_object_store,
    is_uri,
    reason,
    redact,
    shown_uri,
    sorted_files,
)
from cleanpipe.io.output_guard import MANIFEST, foreign, refuse_foreign, write_manifest
from cleanpipe.io.writers import AtomicDir, OutputError

SUCCESS = "_SUCCESS"


class UriDir:
    """An output folder on ``filesystem`` at ``path``; ``shown`` names it in messages.

    Same interface as :class:`~cleanpipe.io.writers.AtomicDir`: ``with`` gives the local
    folder to write into, ``commit()`` publishes it, an exception removes everything.
    """

    def __init__(self, filesystem: pafs.FileSystem, path: str, shown: str,
                 overwrite: bool = False) -> None:
        self.fs = filesystem
        self.target = path.rstrip("/")
        self.shown = shown
        self.overwrite = overwrite
        parent, name = _split(self.target)
        tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.remote_tmp = f"{parent}/.{name}.tmp-{tag}" if parent else f".{name}.tmp-{tag}"
        self.tmp: Path | None = None

    def _fail(self, what: str, e: BaseException) -> OutputError:
        return OutputError(f"{self.shown}: {what}: {reason(e)}")

    def check(self) -> None:
        """Fail before any work if the target exists (without overwrite), is a file, or the
        bucket cannot be reached with the credentials at hand."""
        parent, _ = _split(self.target)
        if not parent and not is_local(self.fs):
            raise OutputError(f"{self.shown}: the output must be a folder inside the bucket"
                              f" (e.g. {self.shown.rstrip('/')}/cleaned)")
        try:
            info = self.fs.get_file_info(self.target)
            bucket = self.fs.get_file_info(self.target.split("/", 1)[0] or "/")
        except OSError as e:
            raise self._fail("cannot access the output location", e) from e
        if info.type == pafs.FileType.File:
            raise OutputError(f"{self.shown}: exists and is not a directory")
        if info.type == pafs.FileType.Directory:
            self._check_replaceable()
            if not self.overwrite:
                raise OutputError(f"{self.shown}: already exists; pass --overwrite to"
                                  " replace it")
        if bucket.type == pafs.FileType.NotFound:
            raise OutputError(f"{self.shown}: the bucket does not exist; create it first")

    def _check_replaceable(self) -> None:
        """Refuse a remote folder holding files cleanpipe did not write (the same rule as a
        local output: :mod:`cleanpipe.io.output_guard`)."""
        try:
            listing = [i.path[len(self.target):].lstrip("/")
                       for i in sorted_files(self.fs, self.target)]
        except OSError as e:
            raise self._fail("cannot list the existing output", e) from e

        def read(rel: str) -> str | None:
            if rel not in listing:
                return None
            try:
                with self.fs.open_input_stream(f"{self.target}/{rel}") as fh:
                    return fh.read().decode("utf-8")
            except (OSError, UnicodeDecodeError):
                return None

        refuse_foreign(foreign(listing, read), read(MANIFEST) is not None, self.shown)

    def __enter__(self) -> Path:
        self.check()
        self.tmp = Path(tempfile.mkdtemp(prefix="cleanpipe-out-"))
        return self.tmp

    def commit(self) -> None:
        assert self.tmp is not None, "commit() outside `with`"
        write_manifest(self.tmp, also=[SUCCESS])
        try:
            if not is_object_store(self.fs):  # object stores have no folders to create
                self.fs.create_dir(self.remote_tmp, recursive=True)
            pafs.copy_files(str(self.tmp), self.remote_tmp,
                            source_filesystem=pafs.LocalFileSystem(),
                            destination_filesystem=self.fs)
        except OSError as e:
            self.abort()
            raise self._fail("cannot upload the output", e) from e
        try:
            if self.fs.get_file_info(self.target).type != pafs.FileType.NotFound:
                if not self.overwrite:  # appeared while we ran: do not clobber it
                    raise OutputError(f"{self.shown}: appeared during the run; pass"
                                      " --overwrite to replace it")
                self._check_replaceable()  # files added meanwhile stay the user's
                # the marker goes first, so no reader takes a half-deleted folder for done
                _delete_if_present(self.fs, f"{self.target}/{SUCCESS}")
                self.fs.delete_dir(self.target)
            for info in sorted_files(self.fs, self.remote_tmp):
                rel = info.path[len(self.remote_tmp):].lstrip("/")
                dest = f"{self.target}/{rel}"
                if not is_object_store(self.fs):
                    self.fs.create_dir(str(PurePosixPath(dest).parent), recursive=True)
                _move(self.fs, info.path, dest)
            with self.fs.open_output_stream(f"{self.target}/{SUCCESS}") as fh:
                fh.write(b"")
        except OSError as e:
            self.abort()
            raise self._fail("cannot move the output into place (no _SUCCESS marker was"
                             " written: the folder is incomplete)", e) from e
        self._cleanup()

    def _cleanup(self) -> None:
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
        try:
            self.fs.delete_dir(self.remote_tmp)
        except OSError:  # already gone, or never created
            pass

    def abort(self) -> None:
        self._cleanup()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.abort()


def _split(path: str) -> tuple[str, str]:
    parent, _, name = path.rstrip("/").rpartition("/")
    return parent, name


def _move(fs: pafs.FileSystem, src: str, dest: str) -> None:
    """Move one file; where a filesystem has no move, copy then delete (what S3 and GCS do
    server-side anyway)."""
    try:
        fs.move(src, dest)
    except NotImplementedError:  # pyarrow's ArrowNotImplementedError is one too
        fs.copy_file(src, dest)
        fs.delete_file(src)


def _delete_if_present(fs: pafs.FileSystem, path: str) -> None:
    if fs.get_file_info(path).type == pafs.FileType.File:
        fs.delete_file(path)


def output_dir(out: str | Path, overwrite: bool = False) -> AtomicDir | UriDir:
    """Where a run writes: a local path or ``file://`` URI keeps the atomic rename
    (:class:`AtomicDir`); any other URI gets a :class:`UriDir`.

    >>> type(output_dir("out/cleaned")).__name__, type(output_dir("file:///tmp/c")).__name__
    ('AtomicDir', 'AtomicDir')
    """
    text = os.fspath(out)
    if not is_uri(text):
        return AtomicDir(Path(text), overwrite=overwrite)
    fs, path = filesystem_for(text, OutputError)
    if is_local(fs):
        return AtomicDir(Path(path), overwrite=overwrite)
    return UriDir(fs, path, shown_uri(text, path), overwrite=overwrite)


def write_dir_to(local: Path, out: str) -> None:
    """Copy a finished local folder (``check --report-dir``) to a URI; files are replaced."""
    fs, path = filesystem_for(out, OutputError)
    try:
        if not is_object_store(fs):
            fs.create_dir(path, recursive=True)
        pafs.copy_files(str(local), path, source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=fs)
    except OSError as e:
        raise OutputError(f"{redact(out)}: cannot write the reports: {reason(e)}") from e
