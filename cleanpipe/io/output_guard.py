"""What an output path may be, and what ``--overwrite`` may replace.

Two rules keep a run from losing files it did not write:

* **No overlap.** An output equal to an input, inside one, or above one (``-o .`` next to
  the data) is refused before any work: replacing it would delete the input, and a rerun
  would read its own reports as data. The current folder (or one above it) is refused too.
* **Only our own folders are replaced.** Every output holds :data:`MANIFEST`, naming
  cleanpipe and listing each file the run wrote. ``--overwrite`` replaces a folder only when
  its manifest is there and every file in it is listed (an empty folder holds nothing to
  lose, and outputs of versions before the manifest are recognised by their fixed layout).
  Anything else is refused with a one-line :class:`~cleanpipe.io.errors.OutputError`.

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp())
    >>> (out / "notes.txt").write_text("mine")
    4
    >>> foreign_files(out)
    ['notes.txt']
    >>> (out / "notes.txt").unlink()
    >>> _ = (out / "report.json").write_text("{}")
    >>> write_manifest(out)
    >>> foreign_files(out)
    []
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from cleanpipe.io.errors import OutputError
from cleanpipe.io.filesystems import redact
from cleanpipe.version import __version__

#: the marker of an output (and of a temporary folder) cleanpipe wrote
MANIFEST = "_cleanpipe.json"
#: what outputs written before the manifest existed held at their top level
LEGACY_LAYOUT = frozenset({"data", "quarantine", "events.parquet", "report.json", "report.md",
                           "report.html", "junit.xml", "README.md", "_SUCCESS"})


def manifest_text(files: Iterable[str], state: str = "complete", **extra: Any) -> str:
    """The manifest's JSON: who wrote the folder, and which files (POSIX paths, sorted)."""
    body = {"written_by": "cleanpipe", "version": __version__, "state": state,
            **extra, "files": sorted(files)}
    return json.dumps(body, indent=1) + "\n"


def _listing(folder: Path) -> list[str]:
    """Every file, link and empty folder under ``folder`` (POSIX, relative), links not
    followed."""
    found = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        rel = Path(root).relative_to(folder)
        for name in files:
            found.append((rel / name).as_posix())
        for name in dirs:
            p = Path(root) / name
            if p.is_symlink() or not any(p.iterdir()):
                found.append((rel / name).as_posix())
    return sorted(found)


def write_manifest(folder: Path, also: Iterable[str] = ()) -> None:
    """List every file of a finished output in its manifest (written last, atomically);
    ``also``: files the commit adds after it (an object store's ``_SUCCESS``)."""
    files = {f for f in _listing(folder) if f != MANIFEST} | set(also)
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(manifest_text(files), encoding="utf-8")
    tmp.replace(folder / MANIFEST)


def _parse_manifest(text: str | None) -> dict[str, Any] | None:
    try:
        data = json.loads(text) if text is not None else None
    except ValueError:
        return None
    return data if isinstance(data, dict) and data.get("written_by") == "cleanpipe" else None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The manifest of ``folder`` if cleanpipe wrote one there, else None."""
    return _parse_manifest(_read_text(folder / MANIFEST))


def _legacy_output(listing: list[str], read: Callable[[str], str | None]) -> bool:
    # written before the manifest: _SUCCESS, a report.json of ours, nothing else on top
    top = {f.split("/", 1)[0] for f in listing}
    if "_SUCCESS" not in top or not top <= LEGACY_LAYOUT:
        return False
    try:
        report = json.loads(read("report.json") or "")
    except ValueError:
        return False
    return isinstance(report, dict) and "totals" in report and "stages" in report


def is_cleanpipe_folder(folder: Path) -> bool:
    """Whether cleanpipe wrote ``folder``: it holds our manifest (complete or still being
    written), or it has the layout of an output from before the manifest."""
    return (read_manifest(folder) is not None
            or _legacy_output(_listing(folder), lambda f: _read_text(folder / f)))


def foreign(listing: list[str], read: Callable[[str], str | None]) -> list[str]:
    """Of the files ``listing`` (POSIX paths inside a folder, read by ``read``), those that
    cleanpipe did not write: all of them when the folder is not a cleanpipe output; none
    for an empty folder or one of our outputs, untouched since."""
    manifest = _parse_manifest(read(MANIFEST))
    if manifest is None and _legacy_output(listing, read):
        return []
    listed = set(manifest.get("files", [])) if manifest else set()
    listed |= {MANIFEST, MANIFEST + ".tmp"}
    return [f for f in listing if f not in listed]


def foreign_files(folder: Path) -> list[str]:
    """:func:`foreign` for a local folder."""
    return foreign(_listing(folder), lambda f: _read_text(folder / f))


def refuse_foreign(extra: list[str], has_manifest: bool, shown: str) -> None:
    """Raise the one-line error for a folder holding files cleanpipe did not write."""
    if not extra:
        return
    if not has_manifest:
        raise OutputError(f"{shown}: not replaced: it was not written by cleanpipe (no"
                          f" {MANIFEST}; it holds {_few(extra)}); choose another --output")
    raise OutputError(f"{shown}: not replaced: it holds files cleanpipe did not write"
                      f" ({_few(extra)}); move them away or choose another --output")


def check_replaceable(target: Path) -> None:
    """Raise unless ``--overwrite`` may replace the folder ``target`` (see the module doc)."""
    refuse_foreign(foreign_files(target), read_manifest(target) is not None, str(target))


def claim_report_files(folder: Path, names: Iterable[str]) -> None:
    """Before reports are written into ``folder`` (``--report-dir``, often a CI artifacts
    folder that holds other files too): refuse if any of ``names`` is there and cleanpipe
    did not write it, else record ``names`` in the folder's manifest. Other files of the
    folder are neither listed nor touched.

        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "junit.xml").write_text("<theirs/>")
        >>> claim_report_files(d, ["report.json", "junit.xml"])
        Traceback (most recent call last):
        ...
        cleanpipe.io.errors.OutputError: ...junit.xml: not replaced: cleanpipe did not write it...
        >>> (d / "junit.xml").unlink()
        >>> claim_report_files(d, ["report.json", "junit.xml"])
        >>> _ = (d / "junit.xml").write_text("<ours/>")
        >>> claim_report_files(d, ["report.json", "junit.xml"])  # ours now: may be replaced
    """
    names = list(names)
    manifest = read_manifest(folder) if folder.is_dir() else None
    listed = set(manifest.get("files", [])) if manifest else set()
    clash = [n for n in names if n not in listed and (folder / n).exists()]
    if clash and manifest is None and _legacy_report(folder):
        clash = [n for n in clash if n not in LEGACY_LAYOUT]
    if clash:
        raise OutputError(f"{folder / clash[0]}: not replaced: cleanpipe did not write it;"
                          " choose another --report-dir or move the file away")
    folder.mkdir(parents=True, exist_ok=True)
    body = {k: v for k, v in (manifest or {}).items()
            if k not in ("written_by", "version", "files", "state")}
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(manifest_text(listed | set(names), (manifest or {}).get("state", "reports"),
                                 **body), encoding="utf-8")
    tmp.replace(folder / MANIFEST)


def _legacy_report(folder: Path) -> bool:
    # reports written before report folders had a manifest: a report.json of ours
    try:
        report = json.loads(_read_text(folder / "report.json") or "")
    except ValueError:
        return False
    return isinstance(report, dict) and "cleanpipe_version" in report


def _few(names: list[str], n: int = 3) -> str:
    more = f" and {len(names) - n} more" if len(names) > n else ""
    return ", ".join(names[:n]) + more


# ----------------------------------------------------------------------- overlap


def _location(path: str) -> tuple[str, PurePosixPath]:
    """``(root, absolute path)`` comparable across the ways of naming a place: local paths
    resolved (links followed), URIs by scheme, bucket and key (query left out). A glob
    stands for the folder above its first wildcard."""
    text = os.fspath(path)
    parts = urlsplit(text) if "://" in text else None
    root = f"{parts.scheme}://{parts.netloc}" if parts and parts.scheme != "file" else ""
    where = parts.path if parts else text
    cut = min((i for i in (where.find(c) for c in "*?[") if i >= 0), default=-1)
    if cut >= 0:
        where = where[:cut].rsplit("/", 1)[0] or "/"
    if root:
        return root, PurePosixPath("/" + where.strip("/"))
    return "", PurePosixPath(os.path.realpath(os.path.expanduser(where)))


def _inputs(source: Any) -> list[str]:
    if isinstance(source, (str, os.PathLike)):
        return [os.fspath(source)]
    if isinstance(source, (list, tuple)):
        return [os.fspath(s) for s in source if isinstance(s, (str, os.PathLike))]
    return []  # in-memory data: nothing on disk to overlap


def check_no_overlap(output: str | os.PathLike[str], source: Any) -> None:
    """Refuse, before any work, an output that is an input, lies inside one or above one,
    or is (or holds) the current folder.

        >>> check_no_overlap("/data/clean", "/data/raw")
        >>> check_no_overlap("/data", "/data/raw/*.jsonl")
        Traceback (most recent call last):
        ...
        cleanpipe.io.errors.OutputError: /data: holds the input /data/raw/*.jsonl; replacing \
it would delete the input: choose an output outside it
    """
    shown = redact(os.fspath(output))
    root, path = _location(os.fspath(output))
    if not root and _within(PurePosixPath(os.path.realpath(os.getcwd())), path):
        raise OutputError(f"{shown}: is the current folder or holds it; choose another"
                          " --output")
    for given in _inputs(source):
        where = _location(given)
        given = redact(given)
        if where[0] != root:
            continue
        if where[1] == path:
            raise OutputError(f"{shown}: is the input {given}; choose another --output")
        if _within(where[1], path):
            raise OutputError(f"{shown}: holds the input {given}; replacing it would delete"
                              " the input: choose an output outside it")
        if _within(path, where[1]):
            raise OutputError(f"{shown}: is inside the input {given}; a rerun would read the"
                              " output as input: choose an output outside it")


def _within(inner: PurePosixPath, outer: PurePosixPath) -> bool:
    return inner == outer or outer in inner.parents
