"""`zapomni-worker --check`, compose's health check of a worker, stays light: the console
script's module imports neither the models nor the worker (importing them took 17 s in a
compose worker on a loaded host, past the check's 5 s timeout)."""

import subprocess
import sys
import tomllib
from pathlib import Path

SCRIPTS = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())[
    "project"]["scripts"]
HEAVY = ("onnxruntime", "spacy", "arq", "zapomni.workers.main")


def test_the_worker_scripts_module_imports_no_model_and_no_worker():
    module = SCRIPTS["zapomni-worker"].split(":")[0]
    code = f"import sys, {module}; print([m for m in {HEAVY!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]", done.stdout
