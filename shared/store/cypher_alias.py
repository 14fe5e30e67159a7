"""The Cypher of entity types and aliases (workers/entity_types.py) and of reads that resolve an
alias to its person (services/query/entities.py).

An alias: within a namespace, a one-word name that is the first or last word of exactly one
longer name of a person is that person ("Marta" = "Marta Kowalczyk"). Nothing is rewritten:
each mention stays on its own entity and the alias is an edge, ``(:Entity)-[:SAME_AS]->
(:Entity)``, from the one-word entity to the person, set again for the names a graph batch
or a delete touched. An Entity whose name may be a person's (shared/text/entities.py
``may_be_person``) keeps its key's first and last word (``first``, ``last``; indexed:
cypher_schema.SCHEMA), so that the people a word names are found by index, never by a
scan. Reads go through the edge: the person is shown with its
aliases' mentions, and an alias is not listed on its own.
"""

from __future__ import annotations

# how many mentions of each type each entity has (the model's types, MENTIONS.type)
MENTION_TYPES = """
UNWIND $ids AS eid
WITH DISTINCT eid
MATCH (e:Entity {id: eid})<-[r:MENTIONS]-(:Chunk)
RETURN e.id, e.key, e.name, coalesce(r.type, e.type), sum(coalesce(r.count, 1))
"""
# the keys of the entities some chunks mention (before a delete takes them)
MENTIONED_KEYS = """
UNWIND $ids AS id MATCH (:Chunk {id: id})-[:MENTIONS]->(e:Entity)
RETURN DISTINCT e.key
"""
SET_TYPES = """
UNWIND $rows AS r
MATCH (e:Entity {id: r.id})
SET e.type = r.type, e.ner_type = r.ner_type, e.first = r.first, e.last = r.last
"""
# Each one-word entity ($words: {id, word}): the names of people that begin or end with its
# word (at most 2 looked at: one is a merge, two are none); its SAME_AS is made to point at
# the one, or removed. One statement, so the people it counts are the ones it links to
# (graph parts write in parallel; each writes the types it changes before this runs).
ALIASES = """
UNWIND $words AS w
MATCH (e:Entity {id: w.id})
CALL {
  WITH w MATCH (p:Entity {first: w.word})
  WITH p LIMIT 2 RETURN collect(p.id) AS a
}
CALL {
  WITH w MATCH (p:Entity {last: w.word})
  WITH p LIMIT 2 RETURN collect(p.id) AS b
}
WITH e, a + [x IN b WHERE NOT x IN a] AS people
OPTIONAL MATCH (e)-[s:SAME_AS]->(old:Entity)
WITH e, people, collect(s) AS edges, collect(old.id) AS olds
FOREACH (s IN CASE WHEN size(people) = 1 AND olds = people THEN [] ELSE edges END | DELETE s)
WITH e, people, olds
OPTIONAL MATCH (t:Entity {id: CASE WHEN size(people) = 1 THEN people[0] ELSE '' END})
FOREACH (x IN CASE WHEN t IS NULL OR olds = people THEN [] ELSE [t] END |
  MERGE (e)-[:SAME_AS]->(x))
RETURN e.id, size(people)
"""

# reads. An entity and its aliases (the ids of the group, the person's first), from any of
# them: the one the name or id names, else the person it is an alias of
GROUP = """
MATCH (n:Entity {id: $id})
OPTIONAL MATCH (n)-[:SAME_AS]->(p:Entity)
WITH coalesce(p, n) AS e
OPTIONAL MATCH (e)<-[:SAME_AS]-(a:Entity)
WITH e, a ORDER BY a.id LIMIT $limit
RETURN e.id, collect(a.id)
"""
# search_entities: as cypher_graph.ENTITY_TEXT, but an alias is not listed (its person is,
# with the alias's mentions counted as the person's)
ENTITY_TEXT = """
CALL db.idx.fulltext.queryNodes('Entity', $q) YIELD node AS e, score
WITH e, score WHERE ($type IS NULL OR e.type = $type) AND NOT (e)-[:SAME_AS]->(:Entity)
WITH e, score ORDER BY score DESC, e.id LIMIT $limit
MATCH (e)<-[m:MENTIONS]-(:Chunk)
WITH e, score, count(m) AS own
CALL {
  WITH e OPTIONAL MATCH (e)<-[:SAME_AS]-(:Entity)<-[am:MENTIONS]-(:Chunk)
  RETURN count(am) AS more
}
RETURN e.id, e.key, e.name, e.type, own + more, score
"""
