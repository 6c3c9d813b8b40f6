"""Run a pipeline that can stop half-way (for the SIGKILL test).

``python tests/_slow_run.py IN OUT [PAUSE_DIR]``: with PAUSE_DIR, the run writes
``PAUSE_DIR/paused`` when it reaches its 20th batch (of 40 for the test's corpus) and waits
there until ``PAUSE_DIR/resume`` exists, so the test kills it at a known point, not after a
guessed delay.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
from pydantic import PrivateAttr

from cleanpipe import Pipeline
from cleanpipe.contract.stage import Action, Findings, TextResult, TextStage

PAUSE_AT_BATCH = 20


class PauseHalfway(TextStage):
    """Passes the text through unchanged; at batch ``PAUSE_AT_BATCH`` it signals, then waits."""

    name: ClassVar[str] = ""  # not registered: used only in this script
    codes: ClassVar[dict[str, Action]] = {}
    pause_dir: str | None = None
    _calls: int = PrivateAttr(default=0)

    def transform(self, texts: pa.Array) -> TextResult:
        self._calls += 1
        if self.pause_dir is not None and self._calls == PAUSE_AT_BATCH:
            folder = Path(self.pause_dir)
            (folder / "paused").write_text("")
            while not (folder / "resume").exists():
                time.sleep(0.01)
        return TextResult(texts, Findings("pause_halfway"))


def main() -> None:
    src, out = sys.argv[1], sys.argv[2]
    pause_dir = sys.argv[3] if len(sys.argv) > 3 else None
    from cleanpipe.stages.regex_filter import RegexFilter

    stages = [RegexFilter(patterns={"x": "^drop"}), PauseHalfway(pause_dir=pause_dir)]
    pipe = Pipeline(stages=stages, fields=["text"], batch_size=50)
    pipe.run(src, out, overwrite=True, workers=1)


if __name__ == "__main__":
    main()
