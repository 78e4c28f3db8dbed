"""A small terminal progress bar: bytes done of a total, MB/s and time left.

It draws only when its stream is a terminal, at most ten times a second, on one line that it
rewrites with a carriage return, and it clears that line when closed. Anything can feed it a byte
count; it never reads data itself.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Show bytes done of a total on one terminal line (only when the stream is a TTY).

    Args:
        total: bytes expected in all; :meth:`add_total` can raise it later.
        label: a short word shown first, such as ``"shuffle"``.
        stream: where to draw; ``sys.stderr`` when None.
        enabled: False turns the bar off whatever the stream.
        min_interval: seconds between two redraws.

    >>> import io
    >>> bar = Progress(100, label="copy", stream=io.StringIO())
    >>> bar.update(40)
    >>> bar.done, bar.active
    (40, False)
    >>> bar.close()
    """

    def __init__(
        self,
        total: int,
        *,
        label: str = "",
        stream: TextIO | None = None,
        enabled: bool = True,
        min_interval: float = 0.1,
    ) -> None:
        self.total = max(0, int(total))
        self.done = 0
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.active = bool(enabled and isatty is not None and isatty())
        self.min_interval = float(min_interval)
        self._start = time.monotonic()
        self._last_draw = 0.0
        self._width = 0

    def add_total(self, nbytes: int) -> None:
        """Raise the total by ``nbytes`` (work discovered on the way)."""
        self.total += max(0, int(nbytes))

    def update(self, nbytes: int) -> None:
        """Count ``nbytes`` more as done and redraw if enough time has passed."""
        self.done += int(nbytes)
        if self.active:
            now = time.monotonic()
            if now - self._last_draw >= self.min_interval:
                self._last_draw = now
                self._draw(now)

    def rate(self) -> float:
        """Return the average speed so far in MB/s (10^6 bytes per second)."""
        elapsed = time.monotonic() - self._start
        return self.done / elapsed / 1e6 if elapsed > 0 else 0.0

    def _draw(self, now: float) -> None:
        total = max(self.total, self.done, 1)
        frac = self.done / total
        rate = self.rate()
        left = (total - self.done) / (rate * 1e6) if rate > 0 else float("inf")
        eta = f"{left:4.0f}s left" if left != float("inf") else "   ?s left"
        bar_len = 24
        filled = int(frac * bar_len)
        text = (
            f"{self.label} [{'#' * filled}{'.' * (bar_len - filled)}] {frac * 100:5.1f}% "
            f"{self.done / 1e6:,.0f}/{total / 1e6:,.0f} MB {rate:6.1f} MB/s {eta}"
        )
        pad = " " * max(0, self._width - len(text))
        self._width = len(text)
        self.stream.write("\r" + text + pad)
        self.stream.flush()

    def close(self) -> None:
        """Clear the bar's line (if it was drawn)."""
        if self.active and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
