"""The gazetteer check (shared/text/places.py), the type an entity of prose is shown with
(shared/text/entities.py ``prose_type``) and the words an alias is looked up by
(workers/extract.py), on the real gazetteer package; and that the graph signal's plural
rule reads the model's type, not the type shown (services/query/entities.py)."""

from __future__ import annotations

import pytest

from zapomni.services.query.entities import is_term_row, named
from zapomni.shared.text.entities import ENTITY_TYPES, may_be_person, prose_type
from zapomni.shared.text.places import fold, is_place, written_as_name
from zapomni.workers.extract import ends, type_row, words_of


@pytest.mark.parametrize(("name", "folded"), [
    ("Kraków", "krakow"), ("Łódź", "lodz"), ("GDAŃSK", "gdansk"), ("São Paulo", "sao paulo"),
    ("Nizhny  Novgorod", "nizhny novgorod"), ("Île-de-France", "ile de france"),
    ("Straße", "strasse"),
])
def test_a_name_is_folded_without_case_or_diacritics(name, folded):
    assert fold(name) == folded


@pytest.mark.parametrize("name", [
    "Kraków", "Krakow", "Cracow", "kraków",  # a city under its names, with or without marks
    "Warsaw", "Warszawa", "Varsovia", "München", "Munich", "Gdańsk", "Zakopane",
    "Poland", "Germany", "Europe", "California", "New York City",
])
def test_the_gazetteer_confirms_countries_cities_and_regions(name):
    assert is_place(name)


@pytest.mark.parametrize("name", [
    "Marta", "Marta Kowalczyk", "Kowalczyk", "Ojców National Park", "Python", "Zorblax",
    "Stewart",  # an alternate name of a small town (in Venezuela): not read
])
def test_the_gazetteer_does_not_confirm_what_is_no_city_country_or_region(name):
    assert not is_place(name)


def test_only_alternate_names_written_as_names_are_read():
    assert written_as_name("Cracow") and written_as_name("Varsòvia")
    assert not written_as_name("KRK")  # an airport code
    assert not written_as_name("wei duo li ya")  # a romanisation in lower case
    assert not written_as_name("Виктория")  # not in Latin letters


def test_a_gazetteer_place_is_a_place_whatever_type_the_model_gave_it():
    assert prose_type("kraków", {"person": 5}) == "place"
    assert prose_type("zakopane", {"place": 1}) == "place"
    assert prose_type("warsaw", {"organization": 2, "place": 1}) == "place"


def test_a_place_needs_the_model_to_have_read_it_as_a_name():
    # on technical text the model's types are "unknown": "Jersey" there is no island
    assert prose_type("jersey", {"unknown": 3}) == "unknown"
    assert prose_type("jersey", {"unknown": 1, "place": 1}) == "place"  # a tie: a name


def test_a_word_of_a_persons_name_is_no_place():
    # "Sofia" beside "Sofia Nowak": the city is not meant
    assert prose_type("sofia", {"place": 2}, person_word=True) == "unknown"
    assert prose_type("sofia", {"person": 2}, person_word=True) == "person"
    assert prose_type("ojców", {"person": 1}) == "unknown"  # one mention is too few
    assert prose_type("sofia", {"person": 2}) == "place"


@pytest.mark.parametrize(("said", "shown"), [
    ({"person": 1}, "unknown"),  # one mention is too few to agree
    ({"person": 2}, "person"),
    ({"person": 2, "organization": 1}, "person"),  # two of three
    ({"person": 1, "organization": 1}, "unknown"),  # no agreement
    ({"person": 3, "place": 2}, "unknown"),
    ({"organization": 4}, "unknown"),  # organisations are not shown
    ({"event": 1}, "unknown"),
    ({}, "unknown"),
])
def test_a_person_is_a_name_most_of_whose_mentions_agree(said, shown):
    assert prose_type("marta kowalczyk", said) == shown


@pytest.mark.parametrize(("name", "said", "may"), [
    ("Marta Kowalczyk", {"person": 1}, True),
    ("Nadia Wieczorek", {"organization": 3, "person": 1}, True),  # the model wavers
    ("Ludwig van Beethoven", {"person": 2}, True),
    ("Nadia Wieczorek", {"organization": 4}, False),  # no mention says person
    ("Marta", {"person": 3}, False),  # one word: an alias, not what one points at
    ("George finding Szczecin", {"person": 1}, False),  # a span run into the next words
    ("New York", {"person": 1}, False),  # a place
])
def test_what_a_one_word_name_may_be_an_alias_of(name, said, may):
    assert may_be_person(name, said) is may


def test_the_type_filter_accepts_the_types_shown():
    assert {"person", "place", "unknown"} <= set(ENTITY_TYPES)
    assert "organization" not in ENTITY_TYPES


def test_an_alias_is_looked_up_by_the_first_and_last_word_of_names():
    assert ends("marta kowalczyk") == ("marta", "kowalczyk")
    assert ends("jan maria rokita") == ("jan", "rokita")
    assert ends("marta") == (None, None)
    assert words_of(["marta kowalczyk", "kraków", "jan maria rokita"]) == {
        "marta", "kowalczyk", "kraków", "jan", "rokita"}


def test_the_stored_row_keeps_the_models_type_and_the_ends():
    row = type_row("ent_x", "kraków", "Kraków", {"person": 4, "place": 1})
    assert row == {"id": "ent_x", "type": "place", "ner_type": "person", "first": None,
                   "last": None}
    row = type_row("ent_y", "marta kowalczyk", "Marta Kowalczyk", {"organization": 2,
                                                                   "person": 1})
    assert row == {"id": "ent_y", "type": "unknown", "ner_type": "organization",
                   "first": "marta", "last": "kowalczyk"}
    # a type that is none of the model's (a code entity's kind) is kept as it is
    assert type_row("ent_z", "json loads", "json.loads", {"function": 3}) == {
        "id": "ent_z", "type": "function", "ner_type": "function", "first": None,
        "last": None}


@pytest.mark.parametrize(("row", "term"), [
    # id, key, name, type shown, mentions, score, the type most mentions gave
    (["e", "mark", "Mark", "unknown", 3, 1.0, "person"], False),  # now shown without a type
    (["e", "acme", "Acme", "unknown", 3, 1.0, "organization"], False),
    (["e", "rapamycin", "Rapamycin", "unknown", 3, 1.0, "unknown"], True),
    (["e", "statin", "statin", "unknown", 3, 1.0, "unknown"], True),
])
def test_the_plural_rule_reads_the_models_type_not_the_type_shown(row, term):
    # the graph signal matches "marks" to a term, never to a name: names shown without a
    # type since the types hold (issue 35) match as they did
    assert is_term_row(row) is term
    assert named([row[1]], {row[1] + "s"}, is_term_row(row)) is term
