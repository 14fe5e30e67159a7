"""The Cypher of the knowledge graph: the graph task's batches and the one statement that
replaces what a chunk contributed (workers/graph.py, workers/store.py), and the reads of
entities, their neighbours and passages (services/query/entities.py)."""

from __future__ import annotations

from zapomni.shared.store.cypher_search import FILTER, RETURN_HIT, VISIBLE

# A graph task reads chunks in batches, by id order from a cursor ($after, exclusive) up to
# $last (inclusive): the worker holds one batch of ids, never the namespace's. Which chunks:
# not yet read, or (rebuild) not yet rewritten by this task ($task): a rebuild stamps each
# chunk it rewrites, so a part that runs again skips what it already did. A chunk's graph
# state (entities_at, graph_task, pairs, code_targets) is kept on its HAS_CHUNK edge, not on
# the chunk: FalkorDB 4.22 indexes a node again, vector and text, whenever any property of it
# is set (GraphHub_UpdateEntityProperties -> GraphContext_AddNodeToIndices). Measured
# (tests/bench/write_cost.py MARKS, CHUNK_MARKS): on the chunk 1.94 / 4.32 ms a chunk at
# 10k / 100k chunks, more than the chunk's own write (1.02 / 2.63); on the edge 0.015 ms
# (docs/benchmarks.md "FalkorDB writes").
# FalkorDB 4.22's index range on a string returns extra ids past its bounds (measured: 790
# for 500); the "+ ''" copies are checked exactly, after the index narrowed the scan.
_GRAPH_PICK = """
c.id > $after AND c.id <= $last AND c.id + '' > $after AND c.id + '' <= $last
AND m.ready = true
AND CASE WHEN $rebuild THEN coalesce(h.graph_task, '') <> $task
         ELSE h.entities_at IS NULL END
"""
# the whole namespace: a range scan of the chunk id index
GRAPH_BATCH = (
    "MATCH (m:Memory)-[h:HAS_CHUNK]->(c:Chunk) WHERE " + _GRAPH_PICK
    + "RETURN c.id, c.text, m.id, m.metadata ORDER BY c.id LIMIT $batch"
)
# some memories (at most 1,000): from each memory to its chunks
GRAPH_BATCH_OF = (
    "UNWIND $memory_ids AS mid MATCH (m:Memory {id: mid})-[h:HAS_CHUNK]->(c:Chunk) WHERE "
    + _GRAPH_PICK + "RETURN c.id, c.text, m.id, m.metadata ORDER BY c.id LIMIT $batch"
)
# how many chunks a task covers: an aggregate, nothing held but the count
GRAPH_COUNT = """
MATCH (m:Memory)-[h:HAS_CHUNK]->(c:Chunk)
WHERE m.ready = true AND ($memory_ids IS NULL OR m.id IN $memory_ids)
  AND ($rebuild OR h.entities_at IS NULL)
RETURN count(c)
"""
# the memories a task of some memories covers, with their sizes, to group them into parts
MEMORY_SIZES = """
UNWIND $memory_ids AS id MATCH (m:Memory {id: id}) WHERE m.ready = true
RETURN m.id, m.chunk_count ORDER BY m.id
"""

# What a chunk contributed before, undone (the head of both statements that replace it:
# REPLACE_CONTRIBUTIONS below, cypher_code.REPLACE_CODE): its old pairs take one off their
# RELATED weight and their evidence, its old MENTIONS go (``touched``: their entities)
UNDO_CONTRIBUTION = """CALL {
  WITH undone UNWIND undone AS u UNWIND u.old AS pair
  WITH u.id AS id, split(pair, ' ') AS ab
  MATCH (:Entity {id: ab[0]})-[x:RELATED]->(:Entity {id: ab[1]})
  WITH x, collect(id) AS lost
  SET x.weight = x.weight - size(lost), x.evidence = [i IN x.evidence WHERE NOT i IN lost]
}
CALL {
  WITH ids UNWIND ids AS id MATCH (:Chunk {id: id})-[m:MENTIONS]->(e:Entity)
  DELETE m
  RETURN collect(DISTINCT e.id) AS touched
}
"""
# and after the new contribution is written: an edge its old pairs left at weight 0 goes
DROP_SPENT_EDGES = """CALL {
  WITH undone UNWIND undone AS u UNWIND u.old AS pair
  WITH split(pair, ' ') AS ab
  MATCH (:Entity {id: ab[0]})-[x:RELATED]->(:Entity {id: ab[1]})
  WITH DISTINCT x WHERE x.weight <= 0
  DELETE x
}
"""

# What a chunk contributed, replaced in one statement (atomic in FalkorDB: a crash or a
# cancel leaves either the old contribution or the new, never neither). A chunk records the
# entity pairs it contributed (h.pairs on its HAS_CHUNK edge, "id id" strings, bounded per
# chunk): its old pairs take one off their RELATED weight and their evidence, its old
# MENTIONS go; then its new entities, MENTIONS and pairs are written and the chunk is marked
# on its edge (or, $now null: forgotten).
# RELATED.weight counts the chunks whose pairs name the edge; RELATED.evidence keeps the last
# $keep of them. Each MENTIONS keeps the type the model gave the entity in the chunk (the
# type shown is made of them: workers/entity_types.py). An edge left at weight 0 goes, and
# so does an entity no chunk mentions. Writing a chunk twice replaces its contribution by
# the same one: idempotent.
REPLACE_CONTRIBUTIONS = """
UNWIND $chunks AS r
MATCH (c:Chunk {id: r.id})<-[h:HAS_CHUNK]-()
WITH c, h, r, coalesce(h.pairs, []) AS old
SET h.pairs = r.pairs, h.entities_at = $now, h.graph_task = $task
WITH collect(c.id) AS ids, collect({id: c.id, old: old}) AS undone
""" + UNDO_CONTRIBUTION + """CALL {
  WITH ids UNWIND $entities AS en
  WITH en WHERE any(id IN en.chunks WHERE id IN ids)
  MERGE (e:Entity {id: en.id}) ON CREATE SET e.key = en.key, e.name = en.name, e.type = en.type
}
CALL {
  WITH ids UNWIND $mentions AS mn
  WITH mn WHERE mn.chunk IN ids
  MATCH (c:Chunk {id: mn.chunk}) MATCH (e:Entity {id: mn.entity})
  CREATE (c)-[:MENTIONS {count: mn.count, type: mn.type}]->(e)
}
CALL {
  WITH ids UNWIND $related AS rel
  WITH rel, [id IN rel.chunks WHERE id IN ids] AS fresh WHERE size(fresh) > 0
  MATCH (a:Entity {id: rel.a}) MATCH (b:Entity {id: rel.b})
  MERGE (a)-[x:RELATED]->(b)
  WITH x, fresh, x.weight IS NULL AS created
  SET x.weight = coalesce(x.weight, 0) + size(fresh),
      x.evidence = (coalesce(x.evidence, []) + fresh)[-$keep..]
  RETURN sum(CASE WHEN created THEN 1 ELSE 0 END) AS relations
}
""" + DROP_SPENT_EDGES + """CALL {
  WITH touched UNWIND touched AS eid
  MATCH (e:Entity {id: eid}) WHERE NOT (e)<-[:MENTIONS]-(:Chunk)
  DETACH DELETE e
}
RETURN size(ids), relations, touched
"""
# a rebuild of the namespace ends by removing entities no chunk mentions (left by versions
# that wrote entities and mentions in separate statements)
DROP_ORPHANS = """
MATCH (e:Entity) WHERE NOT (e)<-[:MENTIONS]-(:Chunk)
WITH e LIMIT $batch
DETACH DELETE e
RETURN count(e)
"""

COUNT_ENTITIES = """
OPTIONAL MATCH (e:Entity) WITH count(e) AS entities
OPTIONAL MATCH (:Entity)-[x:RELATED]->(:Entity) RETURN entities, count(x)
"""
# $q is query words joined by "|" (services/query/keyword.py: letters and digits only)
ENTITY_TEXT = """
CALL db.idx.fulltext.queryNodes('Entity', $q) YIELD node AS e, score
WITH e, score WHERE $type IS NULL OR e.type = $type
WITH e, score ORDER BY score DESC, e.id LIMIT $limit
MATCH (e)<-[m:MENTIONS]-(:Chunk)
RETURN e.id, e.key, e.name, e.type, count(m), score, coalesce(e.ner_type, e.type)
"""
# the graph signal's candidates for the entities a question names (counted once chosen)
# Ties in score go by id: the same question names the same entities every time (a tie at the
# limit was broken one way in one read and another in the next, so the retrieval bench's
# check of graph mode disagreed with the search on 99 SciFact results)
ENTITY_NAMES = """
CALL db.idx.fulltext.queryNodes('Entity', $q) YIELD node AS e, score
WITH e ORDER BY score DESC, e.id LIMIT $limit
RETURN e.id, e.key, e.name, e.type, coalesce(e.ner_type, e.type)
"""
# an entity ($id) with the mentions of its group ($ids: it and its aliases, cypher_alias.GROUP)
ENTITY_BY_ID = """
MATCH (e:Entity {id: $id})
CALL {
  WITH e UNWIND $ids AS i MATCH (:Entity {id: i})<-[m:MENTIONS]-(:Chunk) RETURN count(m) AS n
}
RETURN e.id, e.key, e.name, e.type, n
"""
NEIGHBOURS = """
UNWIND $ids AS id
MATCH (s:Entity {id: id}) WITH s, id
MATCH (s)-[x:RELATED]-(n:Entity)
WHERE NOT n.id IN $exclude
RETURN id, n.id, n.name, n.type, x.weight ORDER BY x.weight DESC, n.id LIMIT $limit
"""
# "WITH" between the steps keeps the planner walking out from the entity (by its index)
# instead of scanning every Memory
PASSAGES = """
UNWIND $ids AS id MATCH (e:Entity {id: id}) WITH e
MATCH (e)<-[r:MENTIONS]-(c:Chunk) WITH c, sum(r.count) AS count
MATCH (m:Memory)-[:HAS_CHUNK]->(c) WHERE """ + VISIBLE + """
RETURN m.id, c.id, c.text, count, m.source, c.start_line, c.end_line
ORDER BY count DESC, c.id LIMIT $limit
"""
ENTITY_DF = """
UNWIND $ids AS id MATCH (e:Entity {id: id}) WITH e, id
OPTIONAL MATCH (e)<-[m:MENTIONS]-(:Chunk)
RETURN id, count(m)
"""
# the graph signal: chunks scored by the entities they mention. $weighted: [entity id,
# weight (its idf, halved for a neighbour)]. A mention counted twice is worth 1.33
# (saturating at 2), as in BM25. Scored here: the client would parse every posting.
# The last column: the ids of the entities the passage was found through (why["graph"])
GRAPH_HITS = (
    "UNWIND $weighted AS t MATCH (e:Entity {id: t[0]}) WITH e, t "
    "MATCH (e)<-[r:MENTIONS]-(c:Chunk) "
    "WITH c, sum(t[1] * 2.0 * coalesce(r.count, 1) / (coalesce(r.count, 1) + 1.0)) AS score, "
    "collect(t[0]) AS matched "
    "MATCH (m:Memory)-[:HAS_CHUNK]->(c) WHERE " + FILTER
    + "WITH m, c, score, matched ORDER BY score DESC, c.id ASC LIMIT $depth" + RETURN_HIT
    + ", matched"
)
CHUNK_ENTITY_NAMES = """
UNWIND $ids AS id MATCH (:Chunk {id: id})-[r:MENTIONS]->(e:Entity)
RETURN id, e.name, r.count
"""
