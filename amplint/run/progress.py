"""Progress of a long lint run, on standard error, for a person watching a terminal.

Nothing is shown unless standard error is a terminal, the run is not in CI (`CI` set) and it
has already taken `delay` seconds: short runs and logs stay exactly as they were. The line is
redrawn in place (`\\r`) at most a few times a second and erased when the run ends, before
the findings are written.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Optional, TextIO

DELAY_SECONDS = 1.0
_REDRAW_SECONDS = 0.1


def wanted(stream: Optional[TextIO] = None, environ=os.environ) -> bool:
    stream = stream if stream is not None else sys.stderr
    if environ.get("CI") or environ.get("AMPLINT_NO_PROGRESS"):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """`amplint: 1,204/14,343 files linted` while a long run lasts."""

    def __init__(
        self, total: int, stream: Optional[TextIO] = None, delay: Optional[float] = None, enabled: bool = True
    ) -> None:
        self.total = total
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled and total > 0
        self._start = time.monotonic()
        self._delay = DELAY_SECONDS if delay is None else delay
        self._drawn_at: Optional[float] = None
        self._width = 0

    def advance(self, count: int = 1) -> None:
        self.done += count
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._start < self._delay:
            return
        if self._drawn_at is not None and now - self._drawn_at < _REDRAW_SECONDS and self.done < self.total:
            return
        self._drawn_at = now
        line = f"amplint: {self.done:,}/{self.total:,} files linted ({now - self._start:.0f} s)"
        self._write("\r" + line + " " * max(0, self._width - len(line)))
        self._width = len(line)

    def close(self) -> None:
        if self._width:
            self._write("\r" + " " * self._width + "\r")
            self._width = 0

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self.enabled = False
