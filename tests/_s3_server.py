"""A throwaway S3 endpoint for tests: moto's server on a free loopback port.

Tests reach it through ordinary ``s3://`` URIs whose query names the endpoint, so they run
the same ``FileSystem.from_uri`` code a user's bucket would.
"""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs
import pytest

BUCKET = "cleanpipe-test"
#: moto accepts any key; the variables make pyarrow's default credential chain find one
FAKE_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_EC2_METADATA_DISABLED": "true"}


@dataclass
class S3:
    fs: pafs.S3FileSystem
    query: str  # ?endpoint_override=...: appended to every URI

    def uri(self, key: str, bucket: str = BUCKET) -> str:
        return f"s3://{bucket}/{key}{self.query}"

    def put(self, key: str, data: bytes) -> None:
        with self.fs.open_output_stream(f"{BUCKET}/{key}") as fh:
            fh.write(data)

    def upload(self, local: Path, prefix: str) -> None:
        pafs.copy_files(str(local), f"{BUCKET}/{prefix}",
                        source_filesystem=pafs.LocalFileSystem(), destination_filesystem=self.fs)

    def keys(self, prefix: str = "") -> list[str]:
        infos = self.fs.get_file_info(pafs.FileSelector(f"{BUCKET}/{prefix}".rstrip("/"),
                                                        recursive=True, allow_not_found=True))
        return sorted(i.path[len(BUCKET) + 1:] for i in infos if i.type == pafs.FileType.File)



def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def s3_server() -> Iterator[S3]:
    """Start moto, create the bucket, yield an :class:`S3`; skips without moto."""
    server_mod = pytest.importorskip(
        "moto.server", reason="moto[server] is not installed (it is in the dev extra): the"
        " local S3 endpoint for the s3:// tests")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    port = _free_port()
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        with pytest.MonkeyPatch.context() as mp:
            for k, v in FAKE_ENV.items():
                mp.setenv(k, v)
            for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
                mp.delenv(k, raising=False)
            endpoint = f"127.0.0.1:{port}"
            fs = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http",
                                   access_key="testing", secret_key="testing",
                                   region="us-east-1", allow_bucket_creation=True)
            fs.create_dir(BUCKET)
            yield S3(fs, f"?endpoint_override={endpoint}&scheme=http&region=us-east-1")
    finally:
        server.stop()


def unique_prefix(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"
