"""Run a pipeline with a sleeping stage (for the SIGKILL test): python tests/_slow_run.py IN OUT."""

from __future__ import annotations

import sys
import time
from typing import ClassVar

import pyarrow as pa

from cleanpipe import Pipeline
from cleanpipe.stages.base import Action, Findings, TextResult, TextStage


class Sleepy(TextStage):
    """Sleeps a little per array, then passes the text through unchanged."""

    name: ClassVar[str] = ""  # not registered: used only in this script
    codes: ClassVar[dict[str, Action]] = {}
    seconds: float = 0.0

    def transform(self, texts: pa.Array) -> TextResult:
        time.sleep(self.seconds)
        return TextResult(texts, Findings("sleepy"))


def main() -> None:
    src, out, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    from cleanpipe.stages.regex_filter import RegexFilter

    stages = [RegexFilter(patterns={"x": "^drop"}), Sleepy(seconds=seconds)]
    pipe = Pipeline(stages=stages, fields=["text"], batch_size=50)
    pipe.run(src, out, overwrite=True, workers=1)


if __name__ == "__main__":
    main()
