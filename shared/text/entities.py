"""Entities: which spaCy labels become Entity nodes, how a mention is normalised into the key
that names one entity, and the entity's id. Workers write with these; the query service
matches questions against them. Pure functions, no model here (see workers/extract.py)."""

from __future__ import annotations

import hashlib
import re

from zapomni.shared.text.nertext import UNKNOWN

# named things; dates, numbers, money and ordinals make hubs, not knowledge
KEEP_LABELS = {
    "PERSON": "person", "ORG": "organization", "GPE": "place", "LOC": "place",
    "FAC": "place", "NORP": "group", "PRODUCT": "product", "EVENT": "event",
    "WORK_OF_ART": "work", "LAW": "law", "LANGUAGE": "language",
}
# the kinds of symbols of source code (shared/text/code_symbols.py: exact, from the syntax tree)
CODE_TYPES = ("module", "class", "function", "method", "constant")
# "unknown": where the model's type is not to be trusted (shared/text/nertext.py)
ENTITY_TYPES = tuple(sorted({*KEEP_LABELS.values(), UNKNOWN, *CODE_TYPES}))
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
    merge joins two people's relations, which is worse than a missed one. The type is not
    part of the key — the small model calls one name PERSON here and ORG there; the
    entity's type is the one most of its mentions have (cypher_graph.REPLACE_CONTRIBUTIONS)."""
    key = _NOT_WORD.sub(" ", clean_name(name).casefold()).strip()
    return _INITIALS.sub(lambda run: run.group().replace(" ", ""), key)


def entity_id(key: str) -> str:
    return "ent_" + hashlib.sha256(key.encode()).hexdigest()[:24]


def entity_type(label: str) -> str | None:
    """Our type for a spaCy label, or None for labels that are not kept."""
    return KEEP_LABELS.get(label)
