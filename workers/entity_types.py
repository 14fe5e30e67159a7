"""The shown type and the alias of the entities a graph batch or a delete touched.

An entity of prose is shown as a place the gazetteer confirms, a person its mentions agree
on, else without a type (shared/text/entities.py ``prose_type``). A one-word name that begins
or ends exactly one person's name in the namespace is that person: an edge SAME_AS from it to
the person (shared/store/cypher_alias.py), recomputed whenever either side is touched, so a
second "Marta Nowak" or the delete of Marta Kowalczyk's memories undoes the merge. What is
read per batch: the touched entities' mentions and, for each word a touched name begins or
ends with, one index lookup; never the namespace's entities.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

from falkordb.asyncio.graph import AsyncGraph

from zapomni.shared.store import cypher_alias
from zapomni.shared.store.graphstore import run
from zapomni.shared.text.entities import MODEL_TYPES, entity_id, may_be_person, prose_type
from zapomni.shared.text.places import gazetteer

BATCH = 1000  # entities per statement


def ends(key: str) -> tuple[str | None, str | None]:
    """The first and last word of a name of two words or more (None, None for one word)."""
    words = key.split(" ")
    return (words[0], words[-1]) if len(words) > 1 else (None, None)


def words_of(keys: list[str]) -> set[str]:
    """The one-word names these keys are, or begin or end with."""
    out: set[str] = set()
    for key in keys:
        first, last = ends(key)
        out.update((first, last) if first else (key,))
    return out


Found = dict[str, tuple[str, str, dict]]


async def mention_types(graph: AsyncGraph, ids: list[str]) -> Found:
    """id -> (key, name, mentions per type the model gave) of those of ``ids`` still
    mentioned."""
    found: Found = {}
    for start in range(0, len(ids), BATCH):
        rows = await run(graph, cypher_alias.MENTION_TYPES, {"ids": ids[start:start + BATCH]})
        for eid, key, name, kind, count in rows:
            found.setdefault(eid, (key, name, defaultdict(int)))[2][kind] += int(count)
    return found


def type_row(eid: str, key: str, name: str, said: dict, person_word: bool = False) -> dict:
    """What SET_TYPES writes for one entity: its shown type, the type most of its mentions
    have (``ner_type``: what it was shown with before, kept for the graph signal's plural
    rule), and, for a name that may be a person's (``may_be_person``), its first and last
    word, by which a one-word name finds it."""
    most = min(said.items(), key=lambda item: (-item[1], item[0]))[0]
    prose = set(said) <= MODEL_TYPES  # others' types (code) stay theirs
    shown = prose_type(key, said, person_word) if prose else most
    first, last = ends(key) if prose and may_be_person(name, said) else (None, None)
    return {"id": eid, "type": shown, "ner_type": most, "first": first, "last": last}


async def set_types(graph: AsyncGraph, rows: list[dict]) -> None:
    for start in range(0, len(rows), BATCH):
        await run(graph, cypher_alias.SET_TYPES, {"rows": rows[start:start + BATCH]})


async def settle(graph: AsyncGraph, ids: list[str], keys: list[str] = ()) -> None:
    """Type the entities ``ids`` and set again the aliases of every one-word name among them
    or that one of their names (or ``keys``: names just deleted) begins or ends with."""
    await asyncio.to_thread(gazetteer)  # loaded once per process, off the event loop
    found = await mention_types(graph, sorted(set(ids)))
    # an entity an import wrote bare (no key yet) is typed once its properties arrive
    # (workers/import_graph.py write_graph)
    found = {eid: entity for eid, entity in found.items() if entity[0] is not None}
    await set_types(graph, [type_row(eid, *entity) for eid, entity in found.items()
                            if " " in entity[0]])
    words = sorted(words_of([entity[0] for entity in found.values()] + list(keys)))
    people: dict[str, int] = {}
    for start in range(0, len(words), BATCH):
        rows = await run(graph, cypher_alias.ALIASES, {"words": [
            {"id": entity_id(word), "word": word} for word in words[start:start + BATCH]]})
        people.update({eid: int(count) for eid, count in rows})
    singles = {eid: found[eid] for eid in people if eid in found}
    singles.update(await mention_types(graph, sorted(set(people) - set(singles))))
    await set_types(graph, [type_row(eid, *entity, people[eid] > 0)
                            for eid, entity in singles.items()])


async def mentioned_keys(graph: AsyncGraph, chunk_ids: list[str]) -> list[str]:
    """The keys of the entities these chunks mention (their aliases are set again after the
    chunks' contribution is undone, when those entities may be gone)."""
    rows = await run(graph, cypher_alias.MENTIONED_KEYS, {"ids": chunk_ids})
    return [row[0] for row in rows if row[0]]

