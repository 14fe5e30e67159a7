"""Progress of a CLI command on stderr (ingest, export, import, reembed): a rich bar on a
terminal, plain lines (at most one every few seconds) when stderr is a file or a pipe, so a
log gets no control characters. A note says what the command is doing or waiting for."""

from __future__ import annotations

import sys
import time
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as Bar

PLAIN_EVERY = 5.0  # seconds between plain progress lines
MEMORIES = ("memory", "memories")


class Progress:
    """``done`` of ``total`` things (``unit``: its singular and plural), shown while a
    command runs. Holds a rich live display (a terminal) or the time of the last line."""

    def __init__(self, label: str, total: int, unit: tuple[str, str], *,
                 quiet: bool = False) -> None:
        self.label, self.total, self.unit, self.quiet = label, total, unit, quiet
        self.done = 0
        self.note = ""
        self.last = 0.0
        self.shown: tuple = ()  # what the last plain line said
        self.started = time.monotonic()
        self.bar: Bar | None = None
        if sys.stderr.isatty() and not quiet:
            self.bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TimeElapsedColumn(), console=Console(stderr=True))
            self.task = self.bar.add_task(f"{label}: {unit[1]}", total=total or None)

    def __enter__(self) -> Progress:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.bar is not None:
            self.bar.stop()
        elif kind is None and not self.quiet and self.shown != self._state():
            self.line()

    def update(self, done: int, total: int | None = None, note: str | None = None) -> None:
        """``done`` so far (of ``total``, when it is known now); ``note``: what it is doing
        (None: as before, "": nothing to say)."""
        self.done = done
        self.total = self.total if total is None else total
        self.note = self.note if note is None else note
        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=self.total or None,
                            description=f"{self.label}: {self.unit[1]}"
                                        + (f" ({self.note})" if self.note else ""))
        elif not self.quiet and time.monotonic() - self.last >= PLAIN_EVERY:
            self.line()

    def _state(self) -> tuple:
        return self.done, self.total, self.note

    def line(self) -> None:
        self.last, self.shown = time.monotonic(), self._state()
        of = f" / {self.total:,}" if self.total else ""
        unit = self.unit[0] if (self.total or self.done) == 1 else self.unit[1]
        note = f" ({self.note})" if self.note else ""
        print(f"zapomni: {self.label}: {self.done:,}{of} {unit}, "
              f"{self.last - self.started:.0f} s{note}", file=sys.stderr, flush=True)
