"""The ``zapomni`` command's entry point: ``run`` imports the command (fastmcp, redis, msgspec:
seconds on a busy machine) and runs it, so that Ctrl-C at any moment, also while it is still
importing, ends it with one line and exit code 130, never a traceback."""

from __future__ import annotations

import sys


def run() -> None:
    try:
        from zapomni.services.stack.main import main

        main()
    except KeyboardInterrupt:
        print("zapomni: interrupted", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
