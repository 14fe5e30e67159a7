"""DESIGN's process boundaries, checked as a process starts: each entry point imported in a
clean interpreter, and the libraries it must not load looked up in sys.modules. The query
service reads and never enqueues (no arq); the MCP front validates and enqueues and never
embeds or extracts (no onnxruntime, tokenizers or spaCy: about 34 MB of peak memory and
0.1-0.16 s of import it would not use, measured on 2026-12-02 at load 0.3-0.6)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

LOADED = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def loaded_by(module: str) -> set[str]:
    """The top-level packages a fresh interpreter holds once ``module`` is imported."""
    out = subprocess.run([sys.executable, "-c", LOADED, module], check=True,
                         capture_output=True, text=True).stdout
    return set(json.loads(out))


@pytest.mark.parametrize(("entry", "kept_out", "needed"), [
    ("zapomni.services.query.main", {"arq"}, {"falkordb", "onnxruntime"}),
    ("zapomni.services.mcp.main", {"onnxruntime", "tokenizers", "spacy"}, {"fastmcp", "arq"}),
])
def test_a_process_does_not_load_what_it_never_uses(entry: str, kept_out: set[str],
                                                    needed: set[str]) -> None:
    loaded = loaded_by(entry)
    # the entry point really loaded its own libraries, so an empty import cannot pass
    assert needed <= loaded, f"{entry} did not load {sorted(needed - loaded)}"
    assert not kept_out & loaded, f"{entry} loads {sorted(kept_out & loaded)}"
