"""Progress on long runs: a bar on a terminal, plain periodic lines in CI logs."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO


class Progress:
    """Rows read, rows/s and (when the input size is known) ETA.

    On a terminal this is a tqdm bar over input bytes, moving as each block of the input is
    read; otherwise (CI, pipes) one plain line every ``interval`` seconds (rows, MB read,
    rates), so a long run shows it is alive and logs stay readable. ``clock`` (seconds)
    is there for tests.

        >>> import io
        >>> t = [0.0]
        >>> out = io.StringIO()
        >>> p = Progress(stream=out, interval=10, clock=lambda: t[0])
        >>> p.set_total_bytes(4_000_000)
        >>> t[0] = 5; p.advance_bytes(1_000_000)
        >>> t[0] = 11; p.advance_rows(500)
        >>> print(out.getvalue(), end="")
        cleanpipe: 500 rows, 1.0 MB read (45 rows/s, 0.1 MB/s), 25% of input, ETA 33s
    """

    def __init__(self, enabled: bool = True, stream: TextIO | None = None,
                 interval: float = 10.0, label: str = "cleanpipe",
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.interval = interval
        self.label = label
        self.rows = 0
        self.bytes = 0
        self.total_bytes = 0
        self._clock = clock
        self.t0 = clock()
        self._last = self.t0
        self._bar: Any = None
        self._tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()

    def set_total_bytes(self, total: int) -> None:
        self.total_bytes = total
        if self._tty and self._bar is None:
            from tqdm import tqdm

            class Bar(tqdm):  # type: ignore[misc,type-arg]
                # No monitor thread: with a second thread running, the engine cannot fork
                # its workers from this process and starts them from a fork server instead
                # (~190 MB more on t0). Only this bar; the user's own tqdm bars keep theirs.
                monitor_interval = 0

            self._bar = Bar(total=total or None, unit="B", unit_scale=True, file=self.stream,
                            desc=self.label, dynamic_ncols=True)

    def advance_bytes(self, n: int) -> None:
        self.bytes += n
        if self._bar is not None:
            self._bar.update(n)
        elif n:
            self._tick()

    def advance_rows(self, n: int) -> None:
        self.rows += n
        if not self.enabled:
            return
        if self._bar is not None:
            rate = self.rows / max(self._clock() - self.t0, 1e-9)
            self._bar.set_postfix_str(f"{self.rows:,} rows, {rate:,.0f} rows/s", refresh=False)
        else:
            self._tick()

    def _tick(self) -> None:
        """A plain line when ``interval`` seconds have passed since the last one."""
        if not self.enabled:
            return
        now = self._clock()
        if now - self._last < self.interval:
            return
        self._last = now
        took = max(now - self.t0, 1e-9)
        mb = self.bytes / 1e6
        pct = ""
        if self.total_bytes:
            frac = min(self.bytes / self.total_bytes, 1.0)
            eta = took * (1 - frac) / frac if frac > 0 else 0
            pct = f", {frac:.0%} of input, ETA {eta:,.0f}s"
        print(f"{self.label}: {self.rows:,} rows, {mb:,.1f} MB read ({self.rows / took:,.0f}"
              f" rows/s, {mb / took:,.1f} MB/s){pct}", file=self.stream, flush=True)

    def note(self, message: str) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(f"{self.label}: {message}")
        else:
            print(f"{self.label}: {message}", file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
