"""Entities: which spaCy labels become Entity nodes, how a mention is normalised into the key
that names one entity, and the entity's id. Workers write with these; the query service
matches questions against them. Pure functions, no model here (see workers/extract.py)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

from zapomni.shared.text.places import is_place

# the type shown when none is known (here, not in nertext: the front reads the types without
# loading the tokenizer nertext needs)
UNKNOWN = "unknown"
PERSON, PLACE = "person", "place"
# named things; dates, numbers, money and ordinals make hubs, not knowledge. These are what
# the model says of a mention (MENTIONS.type, Entity.ner_type), not what is shown
KEEP_LABELS = {
    "PERSON": PERSON, "ORG": "organization", "GPE": PLACE, "LOC": PLACE,
    "FAC": PLACE, "NORP": "group", "PRODUCT": "product", "EVENT": "event",
    "WORK_OF_ART": "work", "LAW": "law", "LANGUAGE": "language",
}
MODEL_TYPES = frozenset({*KEEP_LABELS.values(), UNKNOWN})
# The types an entity of prose is shown with (prose_type): a place the gazetteer confirms, a
# person its mentions agree on, else none ("unknown"). The model's organisation, product,
# event, work, law, language and group are not shown: the small model is right on them too
# seldom to show (docs/benchmarks.md, "Knowledge graph"), and no set here judges them.
PROSE_TYPES = (PERSON, PLACE, UNKNOWN)
# the kinds of symbols of source code (shared/text/code_symbols.py: exact, from the syntax tree)
CODE_TYPES = ("module", "class", "function", "method", "constant")
ENTITY_TYPES = tuple(sorted({*PROSE_TYPES, *CODE_TYPES}))  # search_entities' type filter
# a person: at least this share of at least this many mentions typed PERSON by the model.
# On the chat set (tests/bench/chat.py, docs/benchmarks.md "People and places") one mention
# was too few: the new user's chat showed the village Ojców, typed PERSON once, as a person
# (6 of 7 right; 6 of 6 with two); the generated set: 0.959 of 123 typed with one, 0.966
# of 118 with two
PERSON_SHARE = 2 / 3
PERSON_MENTIONS = 2
# words a person's name may have in lower case between capitalised ones
_PARTICLES = frozenset({"van", "von", "de", "da", "di", "del", "della", "der", "den", "du",
                        "la", "le", "bin", "ibn", "al", "y"})
MAX_NAME = 120

_SPACE = re.compile(r"\s+")
_POSSESSIVE = re.compile(r"(?:'s|’s|'|’)$")
_EDGE = re.compile(r"^[\W_]+|[\W_]+$")
_LEADING_THE = re.compile(r"^the\s+", re.IGNORECASE)
_NOT_WORD = re.compile(r"[\W_]+")
_INITIALS = re.compile(r"\b\w(?: \w\b)+")


def clean_name(text: str) -> str:
    """The surface form worth showing: one space between words, no possessive, no leading
    "the" or punctuation at the edges."""
    name = _SPACE.sub(" ", text).strip()
    name = _POSSESSIVE.sub("", name)
    name = _LEADING_THE.sub("", name)
    return _EDGE.sub("", name)[:MAX_NAME]


def entity_key(name: str) -> str:
    """What makes two mentions one entity: the cleaned name, case-folded, with every run of
    punctuation or space inside it read as one space ("Junio C. Hamano" = "junio c hamano" =
    "Junio C Hamano"; "Jean-Luc" = "jean luc"), and initials written apart written together
    ("J.R.R. Tolkien" = "J. R. R. Tolkien" = "JRR Tolkien" = "jrr tolkien"). Initials are
    not matched to full names: "J. Hamano" may be Junio or another Hamano, and a wrong
    merge joins two people's relations, which is worse than a missed one (a one-word name
    is an alias of a full name, reversibly: workers/entity_types.py). The type is not part
    of the key — the small model calls one name PERSON here and ORG there (prose_type)."""
    key = _NOT_WORD.sub(" ", clean_name(name).casefold()).strip()
    return _INITIALS.sub(lambda run: run.group().replace(" ", ""), key)


def entity_id(key: str) -> str:
    return "ent_" + hashlib.sha256(key.encode()).hexdigest()[:24]


def entity_type(label: str) -> str | None:
    """Our type for a spaCy label, or None for labels that are not kept."""
    return KEEP_LABELS.get(label)


def prose_type(key: str, said: Mapping[str, int], person_word: bool = False) -> str:
    """The type an entity of prose is shown with, from its key, how many of its mentions
    the model gave each type (``said``) and whether its one word begins or ends the name of
    a person in the namespace (``person_word``: "Marta" beside "Marta Kowalczyk"). A place
    when the gazetteer has the name and the model read it as a name (its mentions are not
    mostly "unknown", as on technical text), whatever type the model gave it ("Kraków",
    typed PERSON) — unless it is a word of a person's name; a person when PERSON_SHARE of
    at least PERSON_MENTIONS mentions say so; else "unknown"."""
    total = sum(said.values())
    if not total:
        return UNKNOWN
    most = max(said.items(), key=lambda item: (item[1], item[0] != UNKNOWN))[0]
    if most != UNKNOWN and not person_word and is_place(key):
        return PLACE
    person = total >= PERSON_MENTIONS and said.get(PERSON, 0) >= PERSON_SHARE * total
    return PERSON if person else UNKNOWN


def may_be_person(name: str, said: Mapping[str, int]) -> bool:
    """Whether a one-word name may be an alias of this one (workers/entity_types.py): two
    words or more, capitalised (but for particles: "Ludwig van Beethoven"), no place, and
    the model typed at least one mention PERSON. Not PERSON_SHARE: the small model calls a
    friend's name an organisation as often as a person ("Nadia Wieczorek" works at ...), and
    on the chat set asking for the share left 18 of 80 people as two entities, this 9,
    with no wrong merge (docs/benchmarks.md, "People and places on chat")."""
    words = name.split()
    return (len(words) > 1 and said.get(PERSON, 0) > 0 and not is_place(name)
            and all(w[:1].isupper() or w in _PARTICLES for w in words)
            and words[-1][:1].isupper())
