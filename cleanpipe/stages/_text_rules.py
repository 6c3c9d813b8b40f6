"""The columnar engine behind the character-level text stages.

A stage is a list of :class:`Rule` s: a reason code, an RE2 pattern that finds it, and the
rewrite that fixes it. One RE2 pass over the whole array finds the strings that hold anything
at all; every further kernel runs on that subset only. Rules whose code is configured as
``fix`` rewrite the subset in order; the others only record findings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cleanpipe.stages._text_util import cp_label, examples, put, regex_mask
from cleanpipe.stages.base import Action, Findings, TextResult


@dataclass(frozen=True)
class Rule:
    """One reason code: where it fires, and how it is fixed.

    ``detect`` is an RE2 pattern; ``replace``/``replacement`` the RE2 rewrite (defaults:
    remove what ``detect`` matches). ``fixer``, when set, rewrites the affected strings in
    Python instead (for context rules RE2 cannot express); it gets and returns a list.
    ``codepoints`` are counted one by one in the metrics and named in ``detail``.
    """

    code: str
    detect: str
    replace: str | None = None
    replacement: str = ""
    codepoints: Sequence[int] = ()
    fixer: Callable[[list[str]], list[str]] | None = None
    detail: str | None = None
    trim: str | None = None
    """Characters trimmed from both ends with ``utf8_trim`` (``detect`` is then unused)."""

    def mask(self, texts: pa.Array) -> np.ndarray:
        if self.trim is None:
            return regex_mask(texts, self.detect)
        if len(texts) == 0:
            return np.zeros(0, dtype=bool)
        shorter = pc.less(pc.binary_length(pc.utf8_trim(texts, self.trim)),
                          pc.binary_length(texts))
        return pc.fill_null(shorter, False).to_numpy(zero_copy_only=False)


@dataclass
class RuleSet:
    stage: str
    rules: list[Rule]
    action_of: Callable[[str], Action]
    limit: int = 5
    prefilter: str | None = None
    metrics: dict = field(default_factory=dict)

    def apply(self, texts: pa.Array) -> TextResult:
        found = Findings(self.stage)
        counts: dict[str, int] = {}
        metrics: dict = {"strings": len(texts), "strings_hit": 0, "codepoints": counts}
        if not self.rules or len(texts) == 0:
            return TextResult(texts, found, metrics)
        union = self.prefilter or "|".join(
            f"(?:{r.detect})" for r in self.rules if r.trim is None)
        hit = regex_mask(texts, union)
        for r in self.rules:
            if r.trim is not None:
                hit |= r.mask(texts)
        rows = np.flatnonzero(hit)
        metrics["strings_hit"] = int(rows.size)
        if rows.size == 0:
            return TextResult(texts, found, metrics)
        # Taking a large subset costs more than the passes it saves.
        sub = texts if rows.size * 2 > len(texts) else texts.take(pa.array(rows))
        if sub is texts:
            rows = np.arange(len(texts), dtype=np.int64)
        if not pa.types.is_large_string(sub.type):
            sub = sub.cast(pa.large_string())
        out = sub
        hits: list[tuple[Rule, np.ndarray, list[str | None] | None]] = []
        for rule in self.rules:
            local = np.flatnonzero(rule.mask(out))
            fixed: list[str] | None = None
            if rule.fixer is not None and local.size:
                # A context rule may keep every match (a ZWJ inside an emoji): only the
                # strings it actually changes are findings.
                old = out.take(pa.array(local)).to_pylist()
                new = rule.fixer(old)
                keep = [i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b]
                local = local[keep]
                fixed = [new[i] for i in keep]
            if local.size == 0:
                continue
            details = self._details(rule, out.take(pa.array(local)), counts)
            hits.append((rule, local, details))
            if self.action_of(rule.code) is not Action.FIX:
                continue
            if fixed is not None:
                out = put(out, local, pa.array(fixed, pa.large_string()))
            elif rule.trim is not None:
                out = pc.utf8_trim(out, rule.trim)
            else:
                out = pc.replace_substring_regex(out, rule.replace or rule.detect,
                                                 rule.replacement)
        for rule, local, details in hits:
            before, after = examples(local, sub, out, self.limit)
            found.add(rows[local], rule.code, self.action_of(rule.code),
                      detail=details if details is not None else rule.detail,
                      before=before, after=after)
        changed = np.flatnonzero(pc.fill_null(pc.not_equal(sub, out), False)
                                 .to_numpy(zero_copy_only=False))
        metrics["strings_changed"] = int(changed.size)
        if changed.size == 0:
            return TextResult(texts, found, metrics)
        if rows.size == len(texts):
            return TextResult(out.cast(texts.type), found, metrics)
        return TextResult(put(texts, rows[changed], out.take(pa.array(changed))), found,
                          metrics)

    @staticmethod
    def _details(rule: Rule, hit: pa.Array, counts: dict[str, int]) -> list[str | None] | None:
        if not rule.codepoints:
            return None
        names: list[list[str]] = [[] for _ in range(len(hit))]
        for cp in rule.codepoints:
            c = pc.count_substring(hit, chr(cp)).to_numpy(zero_copy_only=False)
            total = int(c.sum())
            if total:
                label = cp_label(cp)
                counts[label] = counts.get(label, 0) + total
                for i in np.flatnonzero(c):
                    names[i].append(label)
        return [",".join(n) or None for n in names]


def cls(*items: int | tuple[int, int]) -> str:
    """An RE2 character class from code points and inclusive ranges."""
    parts = []
    for it in items:
        if isinstance(it, tuple):
            parts.append(f"\\x{{{it[0]:X}}}-\\x{{{it[1]:X}}}")
        else:
            parts.append(f"\\x{{{it:X}}}")
    return "[" + "".join(parts) + "]"


def expand(*items: int | tuple[int, int]) -> list[int]:
    out: list[int] = []
    for it in items:
        out.extend(range(it[0], it[1] + 1) if isinstance(it, tuple) else [it])
    return out
