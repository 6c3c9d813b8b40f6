"""``whitespace``: unusual spaces, trailing spaces, runs, blank lines and trimming.

==================  ===================================================  ============
code                what                                                 default
==================  ===================================================  ============
``unusual_space``   U+00A0, U+1680, U+2000–U+200A, U+202F, U+205F        → space
                    (U+3000 IDEOGRAPHIC SPACE only with
                    ``keep_ideographic_space: false``: it is legitimate
                    in CJK text)
``space_run``       two or more spaces/tabs after a non-space            flagged
                    (indentation is never touched; fixing collapses the
                    run to one space, which also realigns tables)
``trailing_space``  spaces/tabs before a line break or the end           removed
``blank_lines``     three or more line breaks in a row                   flagged
``edge_whitespace`` ASCII whitespace at the start or end of the string   trimmed
==================  ===================================================  ============
"""

from __future__ import annotations

import functools

import pyarrow as pa

from cleanpipe.stages._byte_scan import ByteScan
from cleanpipe.stages._text_rules import Rule, RuleSet, cls, expand
from cleanpipe.stages._text_util import plain_input
from cleanpipe.stages.base import Action, ExampleCount, TextResult, TextStage

_UNUSUAL = (0xA0, 0x1680, (0x2000, 0x200A), 0x202F, 0x205F)


class Whitespace(TextStage):
    """Normalise spaces: unusual spaces to ASCII, trailing spaces removed, ends trimmed.

        >>> stage = Whitespace()
        >>> stage(" 10\\u00a0kg  of rice \\nnext line\\t\\n")
        '10 kg  of rice\\nnext line'
        >>> stage("中文\\u3000全角空格")
        '中文\\u3000全角空格'
        >>> Whitespace(actions={"space_run": "fix"})("a   b")
        'a b'
    """

    name = "whitespace"
    codes = {
        "unusual_space": Action.FIX, "space_run": Action.FLAG, "trailing_space": Action.FIX,
        "blank_lines": Action.FLAG, "edge_whitespace": Action.FIX,
    }

    keep_ideographic_space: bool = True
    """Leave U+3000 alone (it is the normal space of CJK text)."""
    examples: ExampleCount = 5
    """Before/after examples kept per code per batch."""

    def _unusual(self) -> tuple:
        return _UNUSUAL if self.keep_ideographic_space else (*_UNUSUAL, 0x3000)

    def _rules(self) -> list[Rule]:
        unusual = self._unusual()
        ws = r"[ \t\n\r\x0B\x0C]"
        rules = [
            Rule("unusual_space", cls(*unusual), replacement=" ", codepoints=expand(*unusual),
                 exact=True),
            Rule("space_run", r"[^ \t\n][ \t]{2,}[^ \t\n]", replace=r"([^ \t\n])[ \t]{2,}",
                 replacement=r"\1 ", detail="run"),
            Rule("trailing_space", r"[ \t]+(\n|$)", replacement=r"\1", detail="trailing",
                 exact=True),
            Rule("blank_lines", r"\n{3,}", replacement="\n\n", detail="blank lines", exact=True),
            Rule("edge_whitespace", f"^{ws}+|{ws}+$", trim=" \t\n\r\x0b\x0c",
                 detail="edges"),
        ]
        return rules

    def transform(self, texts: pa.Array) -> TextResult:
        return RuleSet(self.name, self._rules(), self.action_of, self.examples,
                       scan=_scan(self._unusual())).apply(texts)

    def __call__(self, data: object) -> object:
        return super().__call__(plain_input(data))


@functools.cache
def _scan(unusual: tuple) -> ByteScan:
    # Bits in the order of the rules in ``Whitespace.transform``.
    return ByteScan([unusual], space_run=1, trailing_space=2, blank_lines=3,
                    edge_whitespace=4)
