"""Drop or flag rows whose text matches user regular expressions, on RE2.

User patterns come from a config file someone else may have written, and run over every
string of the corpus: a backtracking engine (Python's ``re``) can take exponential time on a
pattern such as ``(a+)+$``. So patterns run on RE2 through ``pyarrow.compute`` (linear time
in the text, vectorised over the whole array), and a pattern RE2 cannot run (backreferences,
lookaround) is rejected when the pipeline loads, with the key that holds it.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import AfterValidator, Field

from cleanpipe.contract.stage import Action, Findings, TextResult, TextStage


def _check_re2(pattern: str) -> str:
    """``pattern`` if RE2 compiles it; else a ValueError saying why and what to use."""
    try:
        # compiling happens on the call, even for a one-element array
        pc.match_substring_regex(pa.array([""], pa.string()), pattern)
    except pa.ArrowInvalid as e:
        why = str(e).replace("Invalid regular expression: ", "")
        raise ValueError(
            f"RE2 cannot run this pattern ({why}); backreferences and lookaround are not"
            " supported: rewrite it without them (RE2 syntax:"
            " https://github.com/google/re2/wiki/Syntax)"
        ) from None
    return pattern


RE2Pattern = Annotated[str, AfterValidator(_check_re2)]


class RegexFilter(TextStage):
    """Drop (or flag) rows whose text matches any of the given RE2 regular expressions.

    Each pattern has a name, recorded as the finding's detail, so the quarantine says which
    rule removed a row. Patterns are searched anywhere in the text (anchor with ``^``/``$``).

        >>> import pyarrow as pa
        >>> s = RegexFilter(patterns={"url": r"https?://", "phone": r"\\b\\d{3}-\\d{4}\\b"})
        >>> res = s.transform(pa.array(["see http://x.io", "call 555-1234", "fine", None]))
        >>> [(c.code, c.positions.tolist(), c.detail) for c in res.findings.chunks]
        [('regex_match', [0], ['url']), ('regex_match', [1], ['phone'])]
        >>> RegexFilter(patterns={"dup": r"(a)\\1"})
        Traceback (most recent call last):
        ...
        pydantic_core._pydantic_core.ValidationError: 1 validation error for RegexFilter
        patterns.dup
        ...
    """

    name: ClassVar[str] = "regex_filter"
    codes: ClassVar[dict[str, Action]] = {"regex_match": Action.DROP}
    forbidden_actions: ClassVar[dict[str, frozenset[Action]]] = {
        "regex_match": frozenset({Action.FIX})}

    patterns: dict[str, RE2Pattern] = Field(
        min_length=1, description="name -> RE2 pattern; a row matching any of them is hit")
    ignore_case: bool = Field(False, description="match without regard to case")

    def transform(self, texts: pa.Array) -> TextResult:
        findings = Findings(self.name)
        action = self.action_of("regex_match")
        hit_any = np.zeros(len(texts), dtype=bool)
        for key, pattern in self.patterns.items():
            mask = pc.fill_null(
                pc.match_substring_regex(texts, pattern, ignore_case=self.ignore_case), False)
            hit = mask.to_numpy(zero_copy_only=False)
            # one finding per string: the first pattern (in config order) that matches
            new = hit & ~hit_any
            findings.add(new, "regex_match", action, detail=key)
            hit_any |= hit
        return TextResult(texts, findings, {"matched": int(hit_any.sum())})
