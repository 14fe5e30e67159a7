"""Progress of a count on stderr (export, import, reembed): a rich bar on a terminal, plain
lines (at most one every few seconds) when stderr is a file or a pipe."""

from __future__ import annotations

import sys
import time
from types import TracebackType

PLAIN_EVERY = 5.0  # seconds between plain progress lines


class Progress:
    """``done`` of ``total`` things (``unit``), shown while a command runs. Holds a rich
    live display (a terminal) or nothing but the time of the last line."""

    def __init__(self, label: str, total: int, unit: str, *, quiet: bool = False) -> None:
        self.label, self.total, self.unit, self.quiet = label, total, unit, quiet
        self.done = 0
        self.last = 0.0
        self.started = time.monotonic()
        self.bar = None
        if sys.stderr.isatty() and not quiet:
            from rich.progress import Progress as Bar  # fastmcp's dependency; a terminal only

            self.bar = Bar(transient=False)
            self.task = self.bar.add_task(label, total=total or None)

    def __enter__(self) -> Progress:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.bar is not None:
            self.bar.stop()
        elif kind is None and not self.quiet:
            self.line()

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        self.done = done
        if total is not None:
            self.total = total
        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=self.total or None,
                            description=f"{self.label} {note}".strip())
        elif not self.quiet and time.monotonic() - self.last >= PLAIN_EVERY:
            self.line(note)

    def line(self, note: str = "") -> None:
        self.last = time.monotonic()
        elapsed = self.last - self.started
        of = f" / {self.total:,}" if self.total else ""
        extra = f" ({note})" if note else ""
        print(f"zapomni: {self.label}: {self.done:,}{of} {self.unit}, {elapsed:.0f} s{extra}",
              file=sys.stderr, flush=True)
