"""Progress of ``zapomni ingest`` on stderr: rich bars on a terminal, else a plain line now
and then (a log file or a pipe gets no control characters)."""

from __future__ import annotations

import sys
import time
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as Bars

PLAIN_EVERY = 5.0  # seconds between plain lines


class Progress:
    """Files read and queued, then tasks written; a live display while it is entered."""

    def __init__(self, *, enabled: bool, tty: bool = False) -> None:
        self.enabled, self.tty = enabled, tty
        self.counts = {"read": 0, "queued": 0, "written": 0, "total": 0}
        self.last_line = 0.0
        self.bars: Bars | None = None
        if enabled and tty:
            self.bars = Bars(TextColumn("{task.description:<22}"), BarColumn(),
                             MofNCompleteColumn(), TimeElapsedColumn(),
                             console=Console(stderr=True))
            self.ids = {name: self.bars.add_task(label, total=None) for name, label in
                        (("read", "files read"), ("queued", "files queued"),
                         ("written", "embedded and written"))}

    def __enter__(self) -> Progress:
        if self.bars is not None:
            self.bars.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self.bars is not None:
            self.bars.stop()
        elif self.enabled:
            self._line(force=True)

    def read(self) -> None:
        self._step("read")

    def queued(self) -> None:
        self._step("queued")

    def writing(self, total: int) -> None:
        """Reading is over: ``total`` tasks to follow."""
        self.counts["total"] = total
        if self.bars is not None:
            for name in ("read", "queued"):
                self.bars.update(self.ids[name], total=self.counts[name])
            self.bars.update(self.ids["written"], total=total)
        elif self.enabled:
            self._line(force=True)

    def written(self) -> None:
        self._step("written")

    def _step(self, name: str) -> None:
        self.counts[name] += 1
        if self.bars is not None:
            self.bars.advance(self.ids[name])
        elif self.enabled:
            self._line()

    def _line(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last_line >= PLAIN_EVERY:
            self.last_line = now
            c = self.counts
            print(f"zapomni ingest: {c['read']} files read, {c['queued']} queued, "
                  f"{c['written']}/{c['total']} written", file=sys.stderr, flush=True)
