"""Structured logs: one JSON object per line on stderr. Configured only by entry points.

Every logger goes through the root's one handler, the libraries' too: fastmcp installs its own
(rich: boxed tracebacks over many lines) and stops propagating, so its handlers are removed
here. A refused call is the front's to log, in one line with the tool and the reason
(services/mcp/arguments.py, Refusals); fastmcp's own report of it, which has no reason, is
dropped (LIBRARY_REPORTS)."""

from __future__ import annotations

import logging
import sys
import time

import msgspec

_encode = msgspec.json.Encoder().encode
LIBRARIES = ("fastmcp", "uvicorn", "uvicorn.error", "uvicorn.access", "arq", "mcp")
# fastmcp's lines about a call that failed (fastmcp/server/server.py); the front logs its own
LIBRARY_REPORTS = ("Error calling tool", "Error rendering prompt", "Invalid arguments for tool")


class JsonFormatter(logging.Formatter):
    def __init__(self, process: str) -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        event = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "process": self.process,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info and record.exc_info[0] is not None:
            event["error"] = record.exc_info[0].__name__
            event["exc"] = self.formatException(record.exc_info)  # escaped: still one line
        return _encode(event).decode()


def not_a_library_report(record: logging.LogRecord) -> bool:
    return not (record.name.startswith("fastmcp")
                and str(record.msg).startswith(LIBRARY_REPORTS))


def configure_logging(process: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(process))
    handler.addFilter(not_a_library_report)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in LIBRARIES:  # their own handlers go: every line through the root's
        library = logging.getLogger(name)
        library.handlers[:] = []
        library.propagate = True
    for noisy in ("httpx2", "httpcore2", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.Formatter.converter = time.gmtime
    sys.excepthook = log_uncaught


def log_uncaught(kind: type[BaseException], value: BaseException, tb) -> None:
    """An exception that ends the process: one line too, its traceback an escaped field."""
    logging.getLogger("zapomni").critical("the process ends on an uncaught %s", kind.__name__,
                                          exc_info=(kind, value, tb))
