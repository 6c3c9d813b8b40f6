"""URIs (``s3://``, ``gs://``, ``file://``) to pyarrow filesystems; their errors in one line.

Every URI goes through :meth:`pyarrow.fs.FileSystem.from_uri`, so any filesystem pyarrow
supports works the same way and credentials come from where pyarrow looks for them
(``AWS_*`` variables, ``~/.aws``, instance roles, ``GOOGLE_APPLICATION_CREDENTIALS``).

    >>> is_uri("s3://bucket/sft/"), is_uri("data/x.jsonl"), is_uri("C:\\\\data\\\\x.jsonl")
    (True, False, False)
    >>> fs, path = filesystem_for("file:///tmp/cleanpipe-doc/", ValueError)
    >>> type(fs).__name__, path, shown_uri("file:///tmp/x?a=1", "/tmp/x/a.jsonl")
    ('LocalFileSystem', '/tmp/cleanpipe-doc', 'file:///tmp/x/a.jsonl')
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa
import pyarrow.fs as pafs

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
#: query parameters that may carry secrets: never echoed into messages or reports
_SECRET_KEYS = re.compile(r"key|secret|token|password|credential|session", re.IGNORECASE)
_BLOCK = 1 << 22


def is_uri(text: str) -> bool:
    """True for ``scheme://...``; a Windows drive (``C:\\``) or a plain path is not a URI."""
    return bool(_URI.match(text))


def redact(uri: str) -> str:
    """The URI without user info and secret query values, for messages and reports.

    >>> redact("s3://AKIA:s3cr3t@bucket/x?region=eu-west-1&secret_key=abc")
    's3://***@bucket/x?region=eu-west-1&secret_key=***'
    """
    if not is_uri(uri):
        return uri
    parts = urlsplit(uri)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = "&".join(
        f"{k}=***" if _SECRET_KEYS.search(k) else f"{k}={v}" if sep else k
        for k, sep, v in (q.partition("=") for q in parts.query.split("&") if q))
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def shown_uri(uri: str, path: str) -> str:
    """How a path inside ``uri``'s filesystem is named in messages and reports: the URI's
    scheme and the bare path (no credentials, no query)."""
    scheme = uri.split("://", 1)[0].lower()
    return f"{scheme}://{path}" if path.startswith("/") or scheme != "file" else f"file:///{path}"


def filesystem_for(uri: str, error: type[Exception]) -> tuple[pafs.FileSystem, str]:
    """The filesystem and the path inside it; an unknown scheme or a bad URI raises ``error``
    with one line naming the URI."""
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise error(f"{redact(uri)}: cannot open this location: {reason(e)}") from e
    return fs, path.rstrip("/") or path


def is_local(fs: pafs.FileSystem | None) -> bool:
    return fs is None or isinstance(fs, pafs.LocalFileSystem)


#: what an error line names rather than says (quoted bucket and key names, an endpoint's
#: host:port): a key "shard-403.parquet" or a port 40312 is no HTTP 403
_NAMES = re.compile(r"'[^']*'|\"[^\"]*\""
                    r"|(?:\d{1,3}(?:\.\d{1,3}){3}|localhost|[\w-]+(?:\.[\w-]+)+):\d+")
_HTTP_403 = re.compile(r"(?<!\d)403(?!\d)")
_AUTH_CODES = ("ACCESS_DENIED", "INVALID_ACCESS_KEY_ID", "SIGNATURE_DOES_NOT_MATCH",
               "UNRECOGNIZED_CLIENT", "MISSING_AUTHENTICATION_TOKEN", "EXPIRED_TOKEN")


def reason(exc: BaseException) -> str:
    """One short line out of a pyarrow/AWS/GCS error, with a hint when the cause is known.

    >>> reason(OSError("When listing objects under key 'x/' in bucket 'b': AWS Error "
    ...     "NO_SUCH_BUCKET during ListObjectsV2 operation: The specified bucket does not "
    ...     "exist (Request ID: 123)"))
    'the bucket does not exist (NO_SUCH_BUCKET)'
    >>> reason(OSError("When listing objects under key 'x' in bucket 'b': AWS Error "
    ...     "NETWORK_CONNECTION during ListObjectsV2 operation: curlCode: 7, Could not "
    ...     "connect to server; endpoint 127.0.0.1:40312"))
    'cannot reach the storage endpoint (network, or a wrong endpoint_override)'
    >>> [reason(RuntimeError(m)).split(" (")[0] for m in ("HTTP 403 Forbidden",
    ...  "HTTP status code:403", "AWS Error ACCESS_DENIED during GetObject operation: curlCode: 0",
    ...  "When reading 'data/shard-403.parquet' in bucket 'logs403': HTTP 404 Not Found")]
    ['access denied', 'access denied', 'access denied', 'no such file or directory']
    """
    if isinstance(exc, OSError) and exc.strerror and not str(exc).count("Detail"):
        return exc.strerror
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    first = re.sub(r"\s*\(Request ID: [^)]*\)", "", first)
    aws = re.search(r"AWS Error (\w+) during \w+ operation: ?(.*)", first)
    code = aws.group(1) if aws else ""
    said = _NAMES.sub(" ", first)
    upper = said.upper()
    denied = (f"access denied ({code or first[:120]}): check the credentials (AWS_PROFILE or"
              " AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, an instance role;"
              " GOOGLE_APPLICATION_CREDENTIALS for gs://) and their permissions")
    if code == "NO_SUCH_BUCKET" or "NOSUCHBUCKET" in upper or "BUCKET DOES NOT EXIST" in upper:
        return f"the bucket does not exist ({code or 'NoSuchBucket'})"
    if code in _AUTH_CODES:
        return denied
    if code == "NETWORK_CONNECTION" or "COULD NOT CONNECT" in upper or "CURLCODE" in upper:
        return "cannot reach the storage endpoint (network, or a wrong endpoint_override)"
    if "CREDENTIAL" in upper or "PERMISSION" in upper or _HTTP_403.search(said):
        return denied
    if isinstance(exc, FileNotFoundError) or "NOT FOUND" in upper or "NO SUCH" in upper:
        return "no such file or directory"
    if aws:
        return f"{aws.group(2).strip() or code} ({code})"
    return first[:300]


def missing(fs: pafs.FileSystem, path: str) -> str:
    """Why ``path`` is not there: on an object store the bucket itself may be missing."""
    if not is_local(fs):
        bucket = path.split("/", 1)[0]
        try:
            if bucket and fs.get_file_info(bucket).type == pafs.FileType.NotFound:
                return f"the bucket {bucket!r} does not exist"
        except OSError as e:
            return reason(e)
    return "no such file or directory"


def iter_blocks(fs: pafs.FileSystem, path: str) -> Iterator[bytes]:
    """The bytes of a file, or of every file under a folder in :func:`sorted_files` order,
    in blocks (for the input fingerprint)."""
    if is_local(fs):
        p = Path(path)
        files = sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p]
        for f in files:
            with open(f, "rb") as fh:
                while block := fh.read(_BLOCK):
                    yield block
        return
    info = fs.get_file_info(path)
    names = ([i.path for i in sorted_files(fs, path)] if info.type == pafs.FileType.Directory
             else [path])
    for name in names:
        with fs.open_input_stream(name, compression=None) as fh:
            while block := fh.read(_BLOCK):
                yield block


def sorted_files(fs: pafs.FileSystem, base: str) -> list[pafs.FileInfo]:
    """Every file under ``base``, in the order a local ``sorted(Path.rglob())`` gives (by
    path components), so the same tree gives the same shard order, row ids and fingerprint
    wherever it is stored."""
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True))
    files = [i for i in infos if i.type == pafs.FileType.File]
    return sorted(files, key=lambda i: PurePosixPath(i.path).parts)


def is_object_store(fs: pafs.FileSystem) -> bool:
    """S3 and GCS have no folders: nothing to create before writing a key."""
    return fs.type_name in ("s3", "gcs")


def read_bytes(fs: pafs.FileSystem, path: str) -> bytes:
    """A whole file's bytes (local files without pyarrow's stream, as before)."""
    if is_local(fs):
        return Path(path).read_bytes()
    # compression=None: pyarrow would otherwise gunzip by extension; the readers decompress
    with fs.open_input_stream(path, compression=None) as fh:
        return fh.readall()


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A ``glob(recursive=True)`` pattern as a regex over ``/``-separated relative paths.

    >>> r = glob_regex("**/*.jsonl")
    >>> [bool(r.fullmatch(p)) for p in ("a.jsonl", "x/y/a.jsonl", "a.json", "x/a.jsonl.gz")]
    [True, True, False, False]
    >>> bool(glob_regex("part-[0-9]?.csv").fullmatch("part-1a.csv"))
    True
    """
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and "]" in pattern[i + 1:]:
            end = pattern.index("]", i + 2 if pattern[i + 1:i + 2] in "!]" else i + 1)
            body = pattern[i + 1:end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = end + 1
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out))
