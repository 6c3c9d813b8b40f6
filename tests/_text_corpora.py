"""Every string of the real corpora the text stages are judged on (loaded without the engine)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path


def strings_in(value: object) -> Iterator[str]:
    """Every string inside a JSON value (nested conversations/messages included)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings_in(v)


def _jsonl(text: str) -> list[str]:
    out: list[str] = []
    for line in text.split("\n"):  # only "\n": U+2028 inside strings is data
        if line.strip():
            out.extend(strings_in(json.loads(line)))
    return out


def file_strings(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return _jsonl(text)
    if path.suffix == ".json":
        try:
            return list(strings_in(json.loads(text)))
        except json.JSONDecodeError:  # some ".json" files are JSON lines
            return _jsonl(text)
    return text.split("\n")


def folder_strings(folder: Path, every: int = 1, suffixes=(".json", ".jsonl", ".txt")) -> list[str]:
    files = sorted(p for p in folder.rglob("*") if p.suffix in suffixes
                   and p.name not in ("dataset_info.json",) and p.stem.upper() != p.stem)
    out: list[str] = []
    for i, p in enumerate(files):
        if i % every == 0:
            out.extend(file_strings(p))
    return out
