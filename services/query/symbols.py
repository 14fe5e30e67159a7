"""Reads of the code graph (shared/store/cypher_code.py): symbols found by their dotted name,
its last parts or the words of their names, where one is defined and where it is used, and
the symbols a question names for the graph signal. Read-only.

A question names a symbol either as written (``run_until_complete``,
``BaseEventLoop.run_until_complete``, ``asyncio.tasks.Task``: the name or its dotted tail)
or in words ("where does a bounded semaphore raise when released": BoundedSemaphore.release).
Words are matched stemmed (Snowball, as the full-text index does) against the words of the
symbol's own name, which must be at least half covered, of the names around it (class,
module) at half weight, and of its docstring's first sentence ("Protect an awaitable object
from being cancelled" is how a question says ``shield``). Only entities with a ``source``
are symbols: a namespace of prose gets nothing from here.
"""

from __future__ import annotations

import re
from typing import Any

from falkordb.asyncio.graph import AsyncGraph

from zapomni.services.query.keyword import terms
from zapomni.shared.protocol.answers import EntityDetail, EntityHit, Relation, Use
from zapomni.shared.store import cypher_code, cypher_search
from zapomni.shared.store.graphstore import run
from zapomni.shared.text.code_symbols import name_words
from zapomni.shared.text.entities import entity_id
from zapomni.shared.text.words import STOPWORDS, stem

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
CANDIDATES = 200  # symbols the full-text index brings per question
NAMED = 3  # symbols a question names for the graph signal, at most (ties at the top too)
DOC_WORDS, DOC_WEIGHT = 2, 0.5  # a docstring names a symbol with 2+ of the question's words
WRITTEN = 10.0  # a symbol whose name (or dotted tail) the question writes out scores this more
USES, RELATIONS = 25, 50  # get_entity's passages that use a symbol, and its relations, at most


def asked_words(query: str) -> set[str]:
    """The question's words, stemmed, with its identifiers split into theirs too."""
    words = set(terms(query))
    for ident in IDENTIFIER.findall(query):
        words.update(w for w in name_words(ident) if w not in STOPWORDS)
    return {stem(w) for w in words if len(w) > 1}


def written(query: str) -> set[str]:
    """Identifiers the question writes as code would: with ``_``, a dot or inner capitals."""
    return {i.strip(".") for i in IDENTIFIER.findall(query)
            if "_" in i or "." in i.strip(".") or re.search(r"[a-z][A-Z]", i)}


def match_score(key: str, summary: str, asked: set[str], idents: set[str]) -> float:
    """How well a question names the symbol ``key`` (0: not at all): the words of its own
    name it has (at least half of them), of the names around it, and of its docstring's
    first sentence (two or more of those, at half weight)."""
    parts = key.split(".")
    own = {stem(w) for w in name_words(parts[-1])}
    hit = own & asked
    score = len(hit) * len(hit) / len(own) if own and len(hit) * 2 >= len(own) else 0.0
    around = {stem(w) for part in parts[:-1] for w in name_words(part)}
    if score and around:
        score += 0.5 * len(around & asked) / len(around)
    said = len(summary_words(summary) & asked)
    if said >= DOC_WORDS:
        score += DOC_WEIGHT * said
    if any(key == i or key.endswith("." + i) for i in idents):
        score += WRITTEN
    return score


def summary_words(summary: str) -> set[str]:
    return {stem(w) for w in terms(summary)}


async def candidates(graph: AsyncGraph, query: str, kind: str | None, limit: int
                     ) -> list[list[Any]]:
    """Symbols any of whose name's words the query has: id, key, name, type, mentions, score."""
    words = sorted({w for ident in IDENTIFIER.findall(query) for w in name_words(ident)}
                   - STOPWORDS)
    if not words:
        return []
    return await run(graph, cypher_code.SYMBOL_WORDS, {
        "q": "@words|summary:(" + "|".join(words[:64]) + ")", "type": kind, "limit": limit},
        read_only=True)


async def ranked_symbols(graph: AsyncGraph, query: str, kind: str | None, limit: int
                         ) -> list[list[Any]]:
    """The symbols a query names, best first (search_entities)."""
    asked, idents = asked_words(query), written(query) | set(IDENTIFIER.findall(query))
    scored = [(match_score(row[1], row[6] or "", asked, idents), row) for row in
              await candidates(graph, query, kind, max(CANDIDATES, limit))]
    return [row for score, row in sorted(scored, key=lambda s: (-s[0], -int(s[1][4]), s[1][1]))
            if score > 0][:limit]


async def named_symbols(graph: AsyncGraph, query: str) -> list[list[Any]]:
    """The few symbols a question names best, for the graph signal (rows as
    ``ranked_symbols``'), and those tied with the last of them."""
    asked, idents = asked_words(query), written(query)
    scored = sorted(((match_score(row[1], row[6] or "", asked, idents), row) for row in
                     await candidates(graph, query, None, CANDIDATES)),
                    key=lambda s: (-s[0], s[1][1]))
    scored = [(score, row) for score, row in scored if score > 0]
    if len(scored) > NAMED:
        floor = scored[NAMED - 1][0]
        scored = [(score, row) for score, row in scored if score >= floor]
    return [row for _, row in scored]


async def symbol_id(graph: AsyncGraph, name: str) -> str | None:
    """The symbol ``name`` names: its dotted name, or a dotted tail of one (the most
    mentioned symbol when several end so)."""
    name = name.strip()
    if not IDENTIFIER.fullmatch(name):
        return None
    exact = entity_id(name)
    if await run(graph, cypher_code.SYMBOL_PLACES, {"ids": [exact]}, read_only=True):
        return exact
    rows = [row for row in await candidates(graph, name, None, CANDIDATES)
            if row[1].endswith("." + name)]
    return min(rows, key=lambda row: (-int(row[4]), row[1]))[0] if rows else None


async def placed(graph: AsyncGraph, hits: list[EntityHit]) -> list[EntityHit]:
    """The hits, symbols with the file and lines of their definition."""
    rows = await run(graph, cypher_code.SYMBOL_PLACES, {"ids": [h.entity_id for h in hits]},
                     read_only=True) if hits else []
    places = {row[0]: row[1:] for row in rows}
    return [EntityHit(entity_id=h.entity_id, name=h.name, type=h.type, mentions=h.mentions,
                      source=places[h.entity_id][0] or "",
                      start_line=int(places[h.entity_id][1] or 0),
                      end_line=int(places[h.entity_id][2] or 0))
            if h.entity_id in places else h for h in hits]


async def with_code(graph: AsyncGraph, detail: EntityDetail) -> EntityDetail:
    """get_entity's answer, for a symbol with where it is defined, the passages that use it
    and its typed relations; any other entity's as it is."""
    entity = (await placed(graph, [detail.entity]))[0]
    if entity is detail.entity:
        return detail
    eid = entity.entity_id
    uses = await run(graph, cypher_code.SYMBOL_USES, {
        "id": eid, "limit": USES, **cypher_search.visible_params()}, read_only=True)
    relations = []
    for direction, query in (("to", cypher_code.SYMBOL_RELATIONS_OUT),
                             ("from", cypher_code.SYMBOL_RELATIONS_IN)):
        rows = await run(graph, query, {"id": eid, "limit": RELATIONS}, read_only=True)
        relations += [Relation(kind=r[0], direction=direction, entity_id=r[1], name=r[2],
                               type=r[3]) for r in rows]
    return EntityDetail(
        namespace=detail.namespace, entity=entity, neighbours=detail.neighbours,
        passages=detail.passages, relations=relations,
        uses=[Use(memory_id=r[0], chunk_id=r[1], source=r[2] or "", start_line=r[3],
                  end_line=r[4], lines=[int(x) for x in r[5] or []], count=int(r[6]))
              for r in uses])
