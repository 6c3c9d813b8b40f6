"""Hugging Face Hub datasets as an input: ``hub:ORG/NAME[:CONFIG][@SPLIT]``.

The dataset is streamed with ``datasets`` exactly as ``datasets.load_dataset(...,
streaming=True)`` streams it (that call is :func:`datasets.load_dataset_builder` followed by
``as_streaming_dataset``; cleanpipe makes the two steps itself to learn the revision), and its
rows reach the engine as Arrow record batches through the in-memory ``IterableDataset`` path
of :mod:`cleanpipe.io.readers`. Nothing is downloaded whole and nothing is written to the
datasets cache but the metadata ``datasets`` caches itself.

``hf://datasets/ORG/NAME`` (optionally ``@REVISION``, nothing after it) names the same thing;
``hf://datasets/ORG/NAME/path/to/file.parquet`` stays a file on the Hub's filesystem.
``ORG/NAME`` may also be a local folder laid out as a Hub dataset repository (a README.md
whose YAML ``configs:`` names data files and splits), which ``datasets`` reads the same way.

Row ids are ``hub:ORG/NAME:CONFIG@SPLIT:ROW`` (ROW counts from 1 in the split's order), so
they stay the same from one run to the next. The input fingerprint covers the dataset name,
config, split and the revision ``datasets`` resolved (the Hub commit; for a local folder,
``datasets``' hash of its configuration and data files' paths and modification times).

    >>> parse_hub("hub:tatsu-lab/alpaca:default@train")
    HubRef(repo='tatsu-lab/alpaca', config='default', split='train', revision=None)
    >>> parse_hub("hf://datasets/tatsu-lab/alpaca@main")
    HubRef(repo='tatsu-lab/alpaca', config=None, split=None, revision='main')
    >>> parse_hub("hf://datasets/tatsu-lab/alpaca/data/train.parquet") is None
    True
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from cleanpipe.io.errors import InputError
from cleanpipe.io.shard import Shard

PREFIX = "hub:"
_HF_REPO = re.compile(r"hf://datasets/(?P<repo>[^/@]+(?:/[^/@]+)?)(?:@(?P<rev>[^/]+))?/?")


@dataclass(frozen=True)
class HubRef:
    """A dataset on the Hub (or a local folder laid out as one), its config, split, revision."""

    repo: str
    config: str | None = None
    split: str | None = None
    revision: str | None = None

    def shown(self) -> str:
        """How messages and row ids name it: ``hub:ORG/NAME:CONFIG@SPLIT``."""
        return (f"{PREFIX}{self.repo}" + (f":{self.config}" if self.config else "")
                + (f"@{self.split}" if self.split else ""))


def parse_hub(text: str) -> HubRef | None:
    """The dataset ``text`` names, or None when it is not a Hub dataset name."""
    if text.startswith(PREFIX):
        rest = text[len(PREFIX):]
        split = config = None
        head, at, tail = rest.rpartition("@")
        if at and "/" not in tail:
            rest, split = head, tail or None
        head, colon, tail = rest.rpartition(":")
        if colon and "/" not in tail and head:
            rest, config = head, tail or None
        if not rest:
            raise InputError(f"{text}: no dataset named; write hub:ORG/NAME[:CONFIG][@SPLIT]")
        return HubRef(rest, config, split)
    m = _HF_REPO.fullmatch(text)
    return HubRef(m["repo"], revision=m["rev"]) if m else None


_BARE_NAME = re.compile(r"[\w.-]+/[\w-]+")  # a dotted name reads as a file name


def hub_hint(text: str) -> str | None:
    """The message for a missing path that reads like a Hub name (``tatsu-lab/alpaca``),
    pointing at the ``hub:`` form; None otherwise.

        >>> print(hub_hint("no-org/no-set"))
        no-org/no-set: no such file or directory; for a Hugging Face dataset write hub:no-org/no-set
    """
    if not _BARE_NAME.fullmatch(text) or os.path.lexists(text):
        return None
    return (f"{text}: no such file or directory; for a Hugging Face dataset write"
            f" {PREFIX}{text}")


def _is_offline(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says the Hub could not be reached."""
    seen: BaseException | None = exc
    while seen is not None:
        name = type(seen).__name__
        if isinstance(seen, (ConnectionError, TimeoutError)) or any(
                w in name for w in ("Connect", "Timeout", "Offline", "LocalEntryNotFound")):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@contextmanager
def _quiet() -> Iterator[None]:
    """Keep ``huggingface_hub``'s retry warnings off the terminal: the failure, if any, is
    reported once, as one line."""
    loggers = [logging.getLogger(n) for n in ("huggingface_hub", "datasets")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _input_error(shown: str, exc: BaseException) -> InputError:
    if _is_offline(exc):
        return InputError(f"{shown}: cannot reach the Hugging Face Hub (offline, or HF_ENDPOINT"
                          " unreachable) and the dataset is not in the local cache; connect, or"
                          " run once online to cache it")
    if type(exc).__name__ == "DatasetNotFoundError":
        return InputError(f"{shown}: no such dataset on the Hub, or it is private or gated"
                          " (log in with `hf auth login`)")
    return InputError(f"{shown}: cannot load the dataset: {_first_line(exc)}")


def open_hub(ref: HubRef, given: str | None = None) -> tuple[Any, HubRef, str]:
    """The streaming ``IterableDataset`` of ``ref``'s split, ``ref`` with config and split
    filled in, and the revision ``datasets`` resolved. Errors name the input as ``given``
    (default: ``ref.shown()``).

    Without ``@SPLIT``, a dataset with one split reads that split; one with several is an
    :class:`InputError` listing them (reading one of them silently would drop the rest).
    """
    import datasets

    try:
        with _quiet():
            builder = datasets.load_dataset_builder(ref.repo, ref.config, revision=ref.revision)
            streams = builder.as_streaming_dataset(split=ref.split)
    except Exception as e:  # datasets raises many kinds; each becomes one line naming ref
        raise _input_error(given or ref.shown(), e) from e
    split = ref.split
    if isinstance(streams, datasets.IterableDatasetDict):
        if len(streams) != 1:
            raise InputError(f"{given or ref.shown()}: holds the splits {', '.join(streams)};"
                             f" name one as {ref.shown()}@SPLIT")
        split, streams = next(iter(streams.items()))
    done = HubRef(ref.repo, builder.config.name, split, ref.revision)
    return streams, done, str(builder.hash or ref.revision or "unknown")


def hub_shards(ref: HubRef, given: str | None = None) -> list[Shard]:
    """One in-memory shard streaming ``ref`` (typed as ``given``), named as its row ids
    start, carrying the revision read (the input fingerprint and the report's
    ``input.revisions`` name it)."""
    stream, done, revision = open_hub(ref, given)
    return [Shard(given or done.shown(), done.shown(), "memory", obj=stream,
                  revision=revision)]
