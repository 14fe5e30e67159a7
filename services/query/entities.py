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
from dataclasses import dataclass, field
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
from zapomni.shared.text.entities import ENTITY_TYPES, UNKNOWN, entity_id, entity_key

ENTITY_ID = re.compile(r"^ent_[0-9a-f]{24}$")
NAME_CANDIDATES = 200  # entities the full-text index brings per question
NEIGHBOURS_PER_ENTITY = 5
MAX_ALIASES = 50  # aliases of one person read (get_entity), at most
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
        passages=[Passage(memory_id=r[0], chunk_id=r[1], text=r[2], count=int(r[3]),
                          source=r[4] or "", start_line=to_int(r[5]), end_line=to_int(r[6]))
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


def to_int(value: Any) -> int | None:
    return None if value is None else int(value)


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
    plural: "statins" names the term "statin"): id, key, name, type, mentions. Only those
    named have their mentions counted (a question's words match up to NAME_CANDIDATES)."""
    words = terms(query)
    if not words:
        return []
    asked = set(words)
    rows = await run_cells(graph, cypher_graph.ENTITY_NAMES, {"q": "|".join(words),
                                                             "limit": NAME_CANDIDATES})
    rows = [row for row in rows if named(terms(row[1]), asked, is_term_row(row))]
    if not rows:
        return []
    counted = dict(await run_cells(graph, cypher_graph.ENTITY_DF,
                                   {"ids": [row[0] for row in rows]}))
    return [[*row[:4], int(counted.get(row[0], 0))] for row in rows]


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


async def strongest_neighbours(graph: AsyncGraph, entities: set[str]
                               ) -> dict[str, tuple[str, str]]:
    """The entities most often in a sentence with each of ``entities``: neighbour id ->
    (its name, the entity of ``entities`` it was found through; the strongest link's)."""
    if not entities:
        return {}
    rows = await run_cells(graph, cypher_graph.NEIGHBOURS, {
        "ids": sorted(entities), "exclude": sorted(entities),
        "limit": NEIGHBOURS_PER_ENTITY * len(entities) * 4})
    per_entity: dict[str, int] = defaultdict(int)
    near: dict[str, tuple[str, str]] = {}
    for source, neighbour, name, *_ in rows:
        if per_entity[source] < NEIGHBOURS_PER_ENTITY:
            per_entity[source] += 1
            near.setdefault(neighbour, (name, source))
    return near


@dataclass(frozen=True)
class Named:
    """The part of the graph signal that needs only the question (so it runs beside the
    other signals): the entities it names, their strongest neighbours, in how many chunks
    each is mentioned, their names, and the named entity each neighbour was found through."""

    direct: frozenset[str]
    near: frozenset[str]
    mentions: dict[str, int]
    names: dict[str, str] = field(default_factory=dict)
    via: dict[str, str] = field(default_factory=dict)  # neighbour -> named entity


async def named_in(graph: AsyncGraph, query: str, code: bool = True) -> Named:
    """The entities the question names, with their mention counts (the rule of whether the
    graph joins hybrid reads these alone: services/query/search.py, graph_joins): by name,
    the symbols of code it names (services/query/symbols.py; ``code``: whether the namespace
    has held any, SearchState.code — a read saved in prose), and a named person's one-word
    aliases or an alias's person (shared/store/cypher_alias.py)."""
    names, symbols = await asyncio.gather(named_entities(graph, query), named_symbols(
        graph, query) if code else asyncio.sleep(0, []))
    rows = [*names, *symbols]
    mentions = {row[0]: int(row[4]) for row in rows}
    return Named(frozenset(mentions), frozenset(), mentions, {row[0]: row[2] for row in rows})


async def with_neighbours(graph: AsyncGraph, named: Named) -> Named:
    """``named`` and the strongest neighbours of its entities (never one of them)."""
    near = await strongest_neighbours(graph, set(named.direct))
    if not near:
        return named
    counted = await run_cells(graph, cypher_graph.ENTITY_DF, {"ids": sorted(near)})
    return Named(named.direct, frozenset(near),
                 {**named.mentions, **{eid: int(count) for eid, count in counted}},
                 {**named.names, **{eid: name for eid, (name, _) in near.items()}},
                 {eid: source for eid, (_, source) in near.items()})


@dataclass(frozen=True)
class Found:
    """The graph signal's passages (scores 0-1: see graph_signal) and, for each, the ids of
    the entities it was found through."""

    ranked: Ranked
    matched: dict[str, list[str]]


async def graph_signal(graph: AsyncGraph, named: Named, params: dict[str, Any],
                       total: int) -> Found:
    """Chunks scored by the rarity of the entities they mention: those the query names
    (full weight) and their strongest neighbours (half weight). An entity in too many chunks
    says nothing (see COMMON_ENTITY_SHARE); past MAX_POSTINGS mentions in all, the most
    mentioned entities are left out first.

    The score is the share of the weight in play that the passage covers: each entity
    weighs its idf (a neighbour half of it) and a passage covers half of an entity's weight
    with one mention of it, two thirds with two, n/(n+1) with n (BM25's saturation). One
    question's passages keep their order (one divisor for all of them); the scale is 0-1
    like the other modes'."""
    weighted = weigh(named, total)
    if not weighted:
        return Found([], {})
    rows = await run_cells(graph, cypher_graph.GRAPH_HITS, {**params, "weighted": weighted})
    whole = 2.0 * sum(weight for _, weight in weighted)
    return Found([(row[:6], min(1.0, float(row[3]) / whole)) for row in rows],
                 {row[1]: list(row[6]) for row in rows})


def weigh(named: Named, total: int) -> list[list[Any]]:
    """[entity id, weight] for each entity the graph signal reads, rarest first."""
    limit = max(COMMON_ENTITY_FLOOR, COMMON_ENTITY_SHARE * total)
    weighted, postings = [], 0
    for eid, count in sorted(named.mentions.items(), key=lambda item: (item[1], item[0])):
        if not 0 < count <= limit or postings + count > MAX_POSTINGS:
            continue
        postings += count
        weighted.append([eid, idf(total, count) * (
            1.0 if eid in named.direct else NEIGHBOUR_WEIGHT)])
    return weighted


def reasons(named: Named, matched: list[str]) -> dict[str, Any]:
    """``why["graph"]``'s account of a passage: the entities the question names that it
    mentions, and the neighbours it mentions with the named entity each is related to."""
    entities = [named.names[e] for e in matched if e in named.direct]
    via = {named.names[e]: named.names[named.via[e]] for e in matched if e in named.via}
    return {"entities": sorted(entities), **({"via": via} if via else {})}
