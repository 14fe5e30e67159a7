"""The name gate: whether a find in technical text is a name, judged from what MiniLM makes
of the name and of the words around it.

On technical text the small spaCy model takes class names (``Timestamp``, ``Matcher``),
headings (``Generate Markdown``), header fields (``Content-Disposition``) and language tags
(``zh-Hans``) for names as readily as ``Django`` or ``GitHub``, and no rule over one chunk
tells them apart (docs/benchmarks.md, "Knowledge graph"). The embedding model the workers
already carry knows more words than the NER model: a logistic regression over the vector of
the name, the vector of the ~160 characters around it and eight shape features, trained on
the hand-judged samples in tests/data (``./dev bench entities train``), scores each find, and
a find under the threshold is not shown. Prose does not pass through the gate (the model
reads it well: 0.926 on the spot check).

The weights live in models/name_gate.json beside this file (776 numbers, their training
figures beside them); the vectors come from the in-process MiniLM whatever embedder the
server is configured with. Off unless ``ZAPOMNI_NAME_GATE=true``: it also drops a third of
the names in scientific abstracts (RNA, TNF), docs/benchmarks.md, "Knowledge graph".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from importlib import resources

import msgspec
import numpy as np

WIDTH = 80  # characters on each side of a name that its window holds
SHAPES = ("one word", "two words", "three or more", "all caps", "camelCase inside",
          "a digit", "a hyphen", "three characters or fewer")
_INNER_CAPITAL = re.compile(r"[a-z][A-Z]")
_DIGIT = re.compile(r"\d")

Vectors = Callable[[list[str]], np.ndarray]  # texts -> unit vectors (MiniLM's 384)


class Gate(msgspec.Struct, frozen=True):
    """A trained gate: p(name) = sigmoid(features · weights + bias); shown from threshold."""

    weights: list[float]
    bias: float
    threshold: float
    trained_on: dict[str, int] = {}
    held_out: list[dict] = []


def gate_path():
    return resources.files("zapomni.shared") / "models" / "name_gate.json"


def load_gate() -> Gate:
    return msgspec.json.decode(gate_path().read_bytes(), type=Gate)


def shape(name: str) -> list[float]:
    words = len(name.split())
    return [float(v) for v in (
        words == 1, words == 2, words >= 3, name.isupper(), bool(_INNER_CAPITAL.search(name)),
        bool(_DIGIT.search(name)), "-" in name, len(name) <= 3)]


def window(text: str, start: int, end: int) -> str:
    """The name with WIDTH characters either side, whitespace collapsed."""
    return " ".join(text[max(0, start - WIDTH): end + WIDTH].split())


def features(vectors: Vectors, names: Sequence[str], windows: Sequence[str]) -> np.ndarray:
    """One row per find: the name's vector, its window's vector, its shape."""
    embedded = vectors([*names, *windows])
    n = len(names)
    shapes = np.array([shape(name) for name in names], dtype=np.float32).reshape(n, len(SHAPES))
    return np.hstack([embedded[:n], embedded[n:], shapes])


def probabilities(gate: Gate, rows: np.ndarray) -> np.ndarray:
    logits = rows @ np.asarray(gate.weights, dtype=np.float32) + gate.bias
    return 1.0 / (1.0 + np.exp(-logits))


def passes(gate: Gate, vectors: Vectors, names: Sequence[str],
           windows: Sequence[str]) -> list[bool]:
    if not names:
        return []
    found = probabilities(gate, features(vectors, names, windows))
    return [bool(p >= gate.threshold) for p in found]


def save_gate(gate: Gate, path) -> None:
    path.write_text(json.dumps(msgspec.to_builtins(gate), separators=(",", ":")) + "\n")
