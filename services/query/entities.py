"""Reads of the knowledge graph: finding entities by name, one entity with its neighbours and
passages, the entities a passage mentions, and the ``graph`` search signal. Read-only.

The graph signal: entities *named in the question* (every word of the entity's name is a word
of the question, matched through the Entity full-text index), then the chunks that mention
them, and — at half weight — the chunks that mention their strongest neighbours (entities that
share a sentence with them somewhere). Each entity counts by its rarity (BM25 idf over
chunks), so a name found in every chunk adds little. This finds a passage that shares no word
with the question but names what the question's entity is related to.
"""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from falkordb.asyncio.graph import AsyncGraph

from zapomni.services.query.keyword import idf, terms
from zapomni.services.query.symbols import (
    named_symbols,
    placed,
    ranked_symbols,
    symbol_id,
    with_code,
)
from zapomni.shared.protocol.answers import EntityDetail, EntityHit, EntityList, Neighbour, Passage
from zapomni.shared.protocol.api import EntityRef, EntitySearch
from zapomni.shared.protocol.errors import InvalidInput, NotFound, shown
from zapomni.shared.store import cypher_alias, cypher_graph, cypher_search
from zapomni.shared.store.graphstore import GraphStore, namespace_exists, run, run_cells
from zapomni.shared.text.entities import ENTITY_TYPES, entity_id, entity_key
from zapomni.shared.text.nertext import UNKNOWN

ENTITY_ID = re.compile(r"^ent_[0-9a-f]{24}$")
NAME_CANDIDATES = 200  # entities the full-text index brings per question
NEIGHBOURS_PER_ENTITY = 5
MAX_ALIASES = 50  # aliases of one person read, or named with a question's entities, at most
NEIGHBOUR_WEIGHT = 0.5
MAX_POSTINGS = 20_000  # mentions the graph signal sums, at most (rarest entities first)
# an entity in more than this share of the namespace's chunks (and in more than
# COMMON_ENTITY_FLOOR of them) tells little about which passage answers, like a stop word:
# the graph signal leaves it out instead of reading all its postings (measured: a name in
# every eighth memory made the graph signal 40% of the query service's CPU under load)
COMMON_ENTITY_SHARE = 0.1
COMMON_ENTITY_FLOOR = 200
Ranked = list[tuple[list[Any], float]]


def hit(row: list[Any]) -> EntityHit:
    return EntityHit(entity_id=row[0], name=row[2], type=row[3], mentions=int(row[4]))


async def by_words(graph: AsyncGraph, words: list[str], kind: str | None,
                   limit: int, query: str = cypher_graph.ENTITY_TEXT) -> list[list[Any]]:
    """Entities whose name contains any of ``words``: id, key, name, type, mentions, score
    (and, ENTITY_TEXT, the type the model gave most mentions)."""
    if not words:
        return []
    return await run(graph, query, {"q": "|".join(words), "type": kind, "limit": limit},
                     read_only=True)


async def search_entities(store: GraphStore, request: EntitySearch) -> EntityList:
    if request.type is not None and request.type not in ENTITY_TYPES:
        raise InvalidInput(f"type: expected one of {', '.join(ENTITY_TYPES)}")
    empty = EntityList(namespace=request.namespace, query=request.query, results=[])
    if not await namespace_exists(store, request.namespace):
        return empty
    words = terms(request.query)
    graph = store.graph(request.namespace)
    rows = await by_words(graph, words, request.type, max(NAME_CANDIDATES, request.limit),
                          cypher_alias.ENTITY_TEXT)
    asked = set(words)

    def rank(row: list[Any]) -> tuple:
        name = set(terms(row[1]))
        overlap = len(asked & name) / len(asked | name) if name else 0.0
        return (-overlap, -int(row[4]), row[2])

    # symbols of code the query names come first (services/query/symbols.py)
    first = await ranked_symbols(graph, request.query, request.type, request.limit)
    known = {row[0] for row in first}
    rows = first + [row for row in sorted(rows, key=rank) if row[0] not in known]
    return EntityList(namespace=request.namespace, query=request.query,
                      results=await placed(graph, [hit(row) for row in rows[:request.limit]]))


async def get_entity(store: GraphStore, ref: EntityRef) -> EntityDetail:
    eid = ref.name_or_id if ENTITY_ID.match(ref.name_or_id) else entity_id(
        entity_key(ref.name_or_id))
    rows, group = [], [eid]
    if await namespace_exists(store, ref.namespace):
        graph = store.graph(ref.namespace)
        if not ENTITY_ID.match(ref.name_or_id):  # a symbol of code by its (dotted) name
            eid = await symbol_id(graph, ref.name_or_id) or eid
        eid, group = await entity_group(graph, eid)
        rows = await run(graph, cypher_graph.ENTITY_BY_ID, {"id": eid, "ids": group},
                         read_only=True)
    if not rows:
        raise NotFound(f"name_or_id: no entity {shown(ref.name_or_id)} in namespace "
                       f"'{ref.namespace}'; search_entities finds names")
    first = await run(graph, cypher_graph.NEIGHBOURS, {"ids": group, "exclude": group,
                                                 "limit": 25}, read_only=True)
    neighbours = [Neighbour(entity_id=r[1], name=r[2], type=r[3], weight=int(r[4]), depth=1)
                  for r in once_each(first)]
    if ref.depth == 2 and neighbours:
        near = [n.entity_id for n in neighbours[:NEIGHBOURS_PER_ENTITY]]
        second = await run(graph, cypher_graph.NEIGHBOURS, {
            "ids": near, "exclude": [*group, *(n.entity_id for n in neighbours)], "limit": 50},
            read_only=True)
        names = {n.entity_id: n.name for n in neighbours}
        seen: set[str] = set()
        for r in second:
            if r[1] not in seen:
                seen.add(r[1])
                neighbours.append(Neighbour(entity_id=r[1], name=r[2], type=r[3],
                                            weight=int(r[4]), depth=2, via=names[r[0]]))
    passages = await run(graph, cypher_graph.PASSAGES,
                         {"ids": group, "limit": 10, **cypher_search.visible_params()},
                         read_only=True)
    return await with_code(graph, EntityDetail(
        namespace=ref.namespace, entity=hit(rows[0]), neighbours=neighbours,
        passages=[Passage(memory_id=r[0], chunk_id=r[1], text=r[2], count=int(r[3]))
                  for r in passages]))


def once_each(rows: list[list[Any]]) -> list[list[Any]]:
    """Neighbour rows, each neighbour once (of a person and its alias: the heavier edge, as
    the rows come heaviest first)."""
    once: dict[str, list[Any]] = {}
    for row in rows:
        once.setdefault(row[1], row)
    return list(once.values())


async def entity_group(graph: AsyncGraph, eid: str) -> tuple[str, list[str]]:
    """The entity ``eid`` is shown as (the person, when it is an alias of one:
    shared/store/cypher_alias.py) and the ids of its group: it, then its aliases."""
    rows = await run(graph, cypher_alias.GROUP, {"id": eid, "limit": MAX_ALIASES},
                     read_only=True)
    return (rows[0][0], [rows[0][0], *rows[0][1]]) if rows else (eid, [eid])


async def passage_entities(graph: AsyncGraph, chunk_ids: list[str]) -> dict[str, list[str]]:
    """The names each chunk mentions, most mentioned first."""
    if not chunk_ids:
        return {}
    rows = await run_cells(graph, cypher_graph.CHUNK_ENTITY_NAMES, {"ids": chunk_ids})
    found: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for chunk_id, name, count in rows:
        found[chunk_id].append((-int(count), name))
    return {cid: [name for _, name in sorted(pairs)][:20] for cid, pairs in found.items()}


async def named_entities(graph: AsyncGraph, query: str) -> list[list[Any]]:
    """Entities every word of whose name is a word of the query (a term's word, also in the
    plural: "statins" names the term "statin")."""
    words = terms(query)
    asked = set(words)
    rows = await by_words(graph, words, None, NAME_CANDIDATES)
    return [row for row in rows if named(terms(row[1]), asked, is_term_row(row))]


def is_term_row(row: list[Any]) -> bool:
    """A term of a field (written in lower case, or that the model's mentions give no type:
    ENTITY_TEXT's last column, not the shown type, which is "unknown" for any name neither
    a place nor a person), not a proper name: its plural names it too. A person "Mark" is
    not named by "marks"."""
    return row[2] == row[2].lower() or row[-1] == UNKNOWN


def plurals(word: str) -> set[str]:
    """English plurals of a word of 4+ letters: statins, kinases, therapies."""
    if len(word) < 4:
        return set()
    forms = {word + "s", word + "es"}
    if word.endswith("y") and word[-2] not in "aeiou":
        forms.add(word[:-1] + "ies")
    return forms


def named(name: list[str], asked: set[str], term: bool) -> bool:
    """Whether every word of an entity's name is among the question's words."""
    return bool(name) and all(
        word in asked or (term and not plurals(word).isdisjoint(asked)) for word in name)


async def strongest_neighbours(graph: AsyncGraph, entities: set[str]) -> set[str]:
    """The entities most often in a sentence with each of ``entities``."""
    if not entities:
        return set()
    rows = await run(graph, cypher_graph.NEIGHBOURS, {
        "ids": sorted(entities), "exclude": sorted(entities),
        "limit": NEIGHBOURS_PER_ENTITY * len(entities) * 4}, read_only=True)
    per_entity: dict[str, list[str]] = defaultdict(list)
    for source, neighbour, *_ in rows:
        if len(per_entity[source]) < NEIGHBOURS_PER_ENTITY:
            per_entity[source].append(neighbour)
    return {n for ids in per_entity.values() for n in ids}


@dataclass(frozen=True)
class Named:
    """The part of the graph signal that needs only the question (so it runs beside the
    other signals): the entities it names, their strongest neighbours, and in how many
    chunks each is mentioned."""

    direct: frozenset[str]
    near: frozenset[str]
    mentions: dict[str, int]


async def named_in(graph: AsyncGraph, query: str) -> Named:
    """The graph signal's first hop (the mention counts of named entities come with them)."""
    # with the symbols of code the question names (services/query/symbols.py; none in prose)
    names, symbols = await asyncio.gather(named_entities(graph, query),
                                          named_symbols(graph, query))
    mentions = {row[0]: int(row[4]) for row in [*names, *symbols]}
    if mentions:  # a person's aliases count as the person, and an alias's person as it
        mentions.update({eid: int(count) for eid, count in await run(
            graph, cypher_alias.PARTNERS, {"ids": sorted(mentions), "limit": MAX_ALIASES},
            read_only=True)})
    direct = frozenset(mentions)
    near = await strongest_neighbours(graph, set(direct))  # never one of ``direct``
    if near:
        counted = await run(graph, cypher_graph.ENTITY_DF, {"ids": sorted(near)}, read_only=True)
        mentions.update({eid: int(count) for eid, count in counted})
    return Named(direct, frozenset(near), mentions)


async def graph_signal(graph: AsyncGraph, named: Named, params: dict[str, Any], total: int,
                       seeds: list[str] = ()) -> Ranked:
    """Chunks scored by the rarity of the entities they mention: those the query names
    (full weight), their strongest neighbours, and the entities of the ``seeds`` (the
    passages other signals rank first; their bridges lead to the next hop's passages) at
    half weight. Seeds earn nothing from their own entities. An entity in too many chunks
    says nothing (see COMMON_ENTITY_SHARE); past MAX_POSTINGS mentions in all, the most
    mentioned entities are left out first."""
    mentions = dict(named.mentions)
    if seeds:
        rows = await run(graph, cypher_graph.SEED_ENTITIES, {"ids": list(seeds),
                                                        "known": sorted(mentions)},
                         read_only=True)
        mentions.update({eid: int(count) for eid, count in rows})
    limit = max(COMMON_ENTITY_FLOOR, COMMON_ENTITY_SHARE * total)
    weighted, postings = [], 0
    for eid, count in sorted(mentions.items(), key=lambda item: (item[1], item[0])):
        if not 0 < count <= limit or postings + count > MAX_POSTINGS:
            continue
        postings += count
        direct = eid in named.direct
        weighted.append([eid, idf(total, count) * (1.0 if direct else NEIGHBOUR_WEIGHT),
                         not direct and eid not in named.near])
    if not weighted:
        return []
    rows = await run(graph, cypher_graph.GRAPH_HITS, {**params, "weighted": weighted,
                                                "seeds": list(seeds)}, read_only=True)
    return [(row, float(row[3])) for row in rows]
