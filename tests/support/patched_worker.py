"""``python -m tests.support.patched_worker '{"zapomni.workers.ingest.PART_CHUNKS": 8}'``: a
worker process with some module constants set before it starts, for the benchmarks whose
runs were measured with other values than the product's (tuning values are constants, not
settings: docs/configuration.md)."""

from __future__ import annotations

import importlib
import json
import sys

from zapomni.workers.main import main


def set_constants(constants: dict[str, object]) -> None:
    for path, value in constants.items():
        module, name = path.rsplit(".", 1)
        setattr(importlib.import_module(module), name, value)


if __name__ == "__main__":
    set_constants(json.loads(sys.argv.pop(1)))
    main()
