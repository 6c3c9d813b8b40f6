"""``special_tokens``: tokenizer control-token strings found literally inside raw text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
from pydantic import PrivateAttr, model_validator

from cleanpipe.contract import published as pub
from cleanpipe.contract.stage import (
    Action,
    ExampleCount,
    Findings,
    StageError,
    TextResult,
    TextStage,
)
from cleanpipe.text.arrays import examples, put, regex_mask
from cleanpipe.text.token_scan import (
    alternation,
    can_scan_once,
    scan_each,
    scan_once,
    strip_each,
    strip_once,
)


def tokenizer_tokens(path: str | Path, include: str = "special") -> list[str]:
    """The added-token strings of a ``tokenizer.json`` (or a model dir holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise StageError(f"special_tokens: no tokenizer.json at {path}")
    data = json.loads(p.read_text(encoding="utf-8"))
    return [t["content"] for t in data.get("added_tokens", [])
            if t.get("content") and (include == "all" or t.get("special"))]


class SpecialTokens(TextStage):
    """Find special-token strings (``<|endoftext|>``, ``<|im_start|>``, ``</s>``, ``[CLS]``).

    A tokenizer turns these literal strings into control tokens, so a sample that contains
    one ends, or changes role, in the middle. Action ``fix`` (the default) strips them,
    ``flag`` records them, ``drop`` quarantines the row.

        >>> stage = SpecialTokens(tokens=["<|endoftext|>", "[CLS]"])
        >>> stage(["an answer<|endoftext|>", "[CLS] text", "clean"])
        ['an answer', ' text', 'clean']
    """

    name = "special_tokens"
    codes = {"special_token": Action.FIX}
    publishes = frozenset({pub.SPECIAL_TOKENS})

    tokenizer: str | None = None
    """Path to a ``tokenizer.json`` or a model directory holding one."""
    tokens: list[str] = []
    """Token strings to look for (added to the tokenizer's)."""
    include: Literal["special", "all"] = "special"
    """From the tokenizer: only tokens marked special, or every added token (``<think>``...)."""
    examples: ExampleCount = 5
    """Before/after examples kept per batch."""

    _all: list[str] | None = PrivateAttr(default=None)
    _once: bool = PrivateAttr(default=False)

    @model_validator(mode="after")
    def _need_tokens(self) -> SpecialTokens:
        if not self.tokenizer and not self.tokens:
            raise ValueError("special_tokens needs `tokenizer` (path) or `tokens` (list)")
        return self

    def setup(self) -> None:
        if self._all is None:
            found = tokenizer_tokens(self.tokenizer, self.include) if self.tokenizer else []
            # Longest first, so a token that contains another is matched whole.
            self._all = sorted((set(found) | set(self.tokens)) - {""}, key=lambda t: (-len(t), t))
            # One scan for every token when no two can overlap (the same findings, see
            # _token_scan); a pass per token otherwise.
            self._once = can_scan_once(self._all)

    def transform(self, texts: pa.Array) -> TextResult:
        self.setup()
        toks = self._all or []
        found = Findings(self.name)
        if not toks:  # an empty alternation would match every string
            return TextResult(texts, found, {"strings": len(texts), "strings_hit": 0,
                                             pub.SPECIAL_TOKENS: {}})
        rows = np.flatnonzero(regex_mask(texts, alternation(toks)))
        metrics: dict = {"strings": len(texts), "strings_hit": int(rows.size),
                         pub.SPECIAL_TOKENS: {}}
        if rows.size == 0:
            return TextResult(texts, found, metrics)
        sub = texts.take(pa.array(rows)).cast(pa.large_string())
        once = self._once
        names, metrics[pub.SPECIAL_TOKENS] = (scan_once if once else scan_each)(sub, toks)
        out = sub
        if self.action_of("special_token") is Action.FIX:
            out = (strip_once if once else strip_each)(sub, toks)
        before, after = examples(np.arange(rows.size), sub, out, self.examples)
        found.add(rows, "special_token", self.action_of("special_token"),
                  detail=[",".join(n) for n in names], before=before, after=after)
        if out is sub:
            return TextResult(texts, found, metrics)
        return TextResult(put(texts, rows, out), found, metrics)
