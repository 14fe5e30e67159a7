"""``python -m tests.support.patched_worker '{"zapomni.workers.ingest.PART_CHUNKS": 8}'``: a
worker process with some module constants set before it starts, for the benchmarks whose
runs were measured with other values than the product's (tuning values are constants, not
settings: docs/configuration.md). A value ``{"object": "module:name"}`` sets that object."""

from __future__ import annotations

import importlib
import json
import sys

from zapomni.workers.main import main


def uncached(embedder, *_):
    """In place of the worker's CachedEmbedder (tests/support/workers.UNCACHED)."""
    return embedder


def set_constants(constants: dict[str, object]) -> None:
    for path, value in constants.items():
        module, name = path.rsplit(".", 1)
        if isinstance(value, dict) and "object" in value:
            where, _, attr = value["object"].partition(":")
            value = getattr(importlib.import_module(where), attr)
        setattr(importlib.import_module(module), name, value)


if __name__ == "__main__":
    set_constants(json.loads(sys.argv.pop(1)))
    main()
