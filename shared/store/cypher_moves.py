"""The Cypher of moving a namespace: export (read-only, paged by memory id), import (batched
writes of whole memories) and reembed (new vectors into a second property, then a switch).

Vectors live in one of two chunk properties, ``embedding`` or ``embedding_b`` (the
namespace's ZapomniMeta records which: ``x.prop``). A reembed writes the other one, with its
own vector index, and switches the namespace over in one statement when every chunk has it.
Each query that names a vector property exists once per property (``by_prop``): the names
are these two constants, never user data.
"""

from __future__ import annotations

from zapomni.shared.store import cypher_memories, cypher_schema, cypher_search

PROPS = ("embedding", "embedding_b")


def other(prop: str) -> str:
    return PROPS[1] if prop == PROPS[0] else PROPS[0]


def by_prop(query: str) -> dict[str, str]:
    """``query`` (written for ``embedding``) for each vector property."""
    return {p: query.replace("c.embedding", f"c.{p}").replace("'Chunk', 'embedding'",
                                                             f"'Chunk', '{p}'")
            for p in PROPS}


VECTOR_INDEX = by_prop(cypher_schema.VECTOR_INDEX)
MERGE_CHUNKS = by_prop(cypher_memories.MERGE_CHUNKS)
SEARCH_VECTOR = by_prop(cypher_search.SEARCH_VECTOR)
SEARCH_EXACT = by_prop(cypher_search.SEARCH_EXACT)
CHUNK_SIMILARITY = by_prop(cypher_search.CHUNK_SIMILARITY)

# the namespace's model, dimension and vector property, and the reembed under way (if any)
READ_META = """
MATCH (x:ZapomniMeta {key: 'embedding'})
RETURN x.model, x.dim, coalesce(x.prop, 'embedding'), x.next_model, x.next_dim, x.reembed_task
"""

# ---- export: read-only, one page of memories at a time, by id from a cursor ----
# (the "+ ''" copies: FalkorDB 4.22's index range on a string returns ids past its bounds)
COUNT_EXPORT = """
MATCH (m:Memory) WHERE m.ready = true AND (m.expires_at IS NULL OR m.expires_at > $now)
OPTIONAL MATCH (m)-[:HAS_CHUNK]->(c:Chunk)
RETURN count(DISTINCT m), count(c)
"""
EXPORT_PAGE = """
MATCH (m:Memory) WHERE m.id > $after AND m.id + '' > $after AND m.ready = true
  AND (m.expires_at IS NULL OR m.expires_at > $now)
WITH m ORDER BY m.id LIMIT $limit
RETURN m.id, m.text, m.content_hash, m.tags, m.source, m.metadata, m.created_at, m.thread,
       m.after, m.importance, m.memory_type, m.pinned, m.expires_at, m.supersedes,
       m.superseded_by, m.access_count, m.accessed_at, m.line_offset, m.occurred_at, m.role
"""
EXPORT_CHUNKS = """
UNWIND $ids AS id MATCH (c:Chunk {memory_id: id})<-[h:HAS_CHUNK]-()
RETURN c.memory_id, c.idx, c.char_start, c.char_end, c.tokens, h.entities_at, h.pairs,
       h.code_targets
"""
EXPORT_VECTORS = by_prop("""
UNWIND $ids AS id MATCH (c:Chunk {memory_id: id})<-[h:HAS_CHUNK]-()
RETURN c.memory_id, c.idx, c.char_start, c.char_end, c.tokens, h.entities_at, h.pairs,
       h.code_targets, c.embedding
""")
# the graph: a page of memories' chunks' relationships to entities, whatever their type;
# then every entity, and every relationship between entities, by id from a cursor
EXPORT_LINKS = """
UNWIND $ids AS id MATCH (c:Chunk {memory_id: id})-[r]->(e:Entity)
RETURN c.memory_id, c.idx, type(r), e.id, properties(r)
"""
COUNT_EXPORT_ENTITIES = "MATCH (e:Entity) RETURN count(e)"
EXPORT_ENTITIES = """
MATCH (e:Entity) WHERE e.id > $after AND e.id + '' > $after
WITH e ORDER BY e.id LIMIT $limit
RETURN e.id, properties(e)
"""
# the relationships out of a page of entities, after the cursor [a, type, b]; RELATED's
# weight and evidence are counted again by the import, so one without other properties stays
EXPORT_RELATIONS = """
UNWIND $ids AS id MATCH (a:Entity {id: id})-[r]->(b:Entity)
WITH a.id AS a, type(r) AS t, b.id AS b, r
WHERE (a > $a OR (a = $a AND (t > $t OR (t = $t AND b > $b))))
  AND (t <> 'RELATED' OR size([k IN keys(r) WHERE NOT k IN ['weight', 'evidence']]) > 0)
RETURN a, t, b, properties(r) ORDER BY a, t, b LIMIT $limit
"""

# ---- import: a batch of whole memories; searchable together, in the last statement ----
# A memory already stored (an import run twice) keeps its state; one left by a failed import
# is taken over by this one (m.task_id), so the sweep leaves it while this import runs
IMPORT_MEMORIES = """
UNWIND $rows AS r
MERGE (m:Memory {id: r.id})
ON CREATE SET m.ready = false, m.gen = -1
SET m.namespace = $namespace, m.content_hash = r.content_hash, m.text = r.text,
    m.source = r.source, m.tags = r.tags, m.metadata = r.metadata, m.meta_kv = r.meta_kv,
    m.created_at = r.created_at, m.chunk_count = r.chunk_count, m.after = r.after,
    m.thread = r.thread, m.importance = r.importance, m.memory_type = r.memory_type,
    m.pinned = r.pinned, m.expires_at = r.expires_at, m.supersedes = r.supersedes,
    m.superseded_by = r.superseded_by, m.access_count = r.access_count,
    m.accessed_at = r.accessed_at, m.line_offset = r.line_offset,
    m.occurred_at = coalesce(r.occurred_at, r.created_at), m.role = r.role,
    m.task_id = CASE WHEN m.ready THEN m.task_id ELSE $task_id END
RETURN count(m)
"""
IMPORT_CHUNKS = by_prop("""
UNWIND $rows AS r
MATCH (m:Memory {id: r.memory_id})
MERGE (c:Chunk {id: r.id})
SET c.memory_id = r.memory_id, c.idx = r.idx, c.text = r.text, c.char_start = r.char_start,
    c.char_end = r.char_end, c.tokens = r.tokens, c.words = r.words,
    c.start_line = r.start_line, c.end_line = r.end_line, c.embedding = vecf32(r.vec)
MERGE (m)-[:HAS_CHUNK]->(c)
""")
IMPORT_THREADS = """
UNWIND $pairs AS p
MATCH (a:Memory {id: p[0]}) MATCH (b:Memory {id: p[1]})
MERGE (a)-[:THEN]->(b)
"""
# the graph of a file that carries it, written once every memory is: entities with every
# property, then relationships between them (a type checked by the file's reader, never
# free text). MERGE on ids: written twice, the same graph. RELATED comes from the chunks'
# pairs (workers/moves.py): only its other properties are set, where it exists.
# a code chunk's names it refers to (cypher_code.REPLACE_CODE), so a file added after the
# import links the chunks that call into it
IMPORT_CODE_TARGETS = """
UNWIND $rows AS r MATCH (c:Chunk {id: r.id})<-[h:HAS_CHUNK]-() SET h.code_targets = r.targets
"""
IMPORT_ENTITIES = """
UNWIND $rows AS r MERGE (e:Entity {id: r.id}) SET e += r.props
"""


def import_relations(rel: str) -> str:
    """Relationships of type ``rel`` (a word: protocol/export.RelType, checked)."""
    if rel == "RELATED":
        return """
UNWIND $rows AS r MATCH (:Entity {id: r.a})-[x:RELATED]->(:Entity {id: r.b}) SET x += r.props
"""
    return f"""
UNWIND $rows AS r MERGE (a:Entity {{id: r.a}}) MERGE (b:Entity {{id: r.b}})
MERGE (a)-[x:{rel}]->(b) SET x += r.props
"""


def import_links(rel: str) -> str:
    """A chunk's relationships of type ``rel`` to entities but MENTIONS (its contribution:
    workers/moves.py), and the MENTIONS' properties beyond count and type."""
    if rel == "MENTIONS":
        return """
UNWIND $rows AS r MATCH (:Chunk {id: r.chunk})-[x:MENTIONS]->(:Entity {id: r.entity})
SET x += r.props
"""
    return f"""
UNWIND $rows AS r MATCH (c:Chunk {{id: r.chunk}}) MERGE (e:Entity {{id: r.entity}})
MERGE (c)-[x:{rel}]->(e) SET x += r.props
"""


# the end: the import's memories searchable, a page per statement
PUBLISH_IMPORT = """
MATCH (m:Memory) WHERE m.ready = false AND m.task_id = $task_id
WITH m LIMIT $limit SET m.ready = true RETURN count(m)
"""

# ---- reembed ----
# start: record the new model beside the old (idempotent: the same task starts once)
BEGIN_REEMBED = """
MATCH (x:ZapomniMeta {key: 'embedding'})
WHERE x.reembed_task IS NULL OR x.reembed_task = $task
SET x.next_model = $model, x.next_dim = $dim, x.reembed_task = $task
RETURN coalesce(x.prop, 'embedding')
"""
# chunks without a vector of the new model, by id from a cursor
REEMBED_BATCH = by_prop("""
MATCH (c:Chunk) WHERE c.id > $after AND c.id + '' > $after AND c.embedding IS NULL
RETURN c.id, c.text ORDER BY c.id LIMIT $batch
""")
REEMBED_WRITE = by_prop("""
UNWIND $rows AS r MATCH (c:Chunk {id: r.id}) SET c.embedding = vecf32(r.vec)
""")
REEMBED_LEFT = by_prop("MATCH (c:Chunk) WHERE c.embedding IS NULL RETURN count(c)")
# the switch, in one statement, only when no chunk lacks the new vector (counted in it).
# (A CALL subquery: "OPTIONAL MATCH ... WITH count(c) ... MATCH (x) WHERE" matched nothing
# in FalkorDB 4.22 even with the count at 0; measured)
SWITCH_MODEL = by_prop("""
MATCH (x:ZapomniMeta {key: 'embedding'}) WHERE x.reembed_task = $task
CALL { MATCH (c:Chunk) WHERE c.embedding IS NULL RETURN count(c) AS missing }
WITH x, missing WHERE missing = 0
SET x.model = x.next_model, x.dim = x.next_dim, x.prop = $prop, x.next_model = NULL,
    x.next_dim = NULL, x.reembed_task = NULL, x.switched_at = $now
RETURN x.model
""")
# the end of a cancelled or failed reembed: the namespace keeps its model
ABANDON_REEMBED = """
MATCH (x:ZapomniMeta {key: 'embedding'}) WHERE x.reembed_task = $task
SET x.next_model = NULL, x.next_dim = NULL, x.reembed_task = NULL
RETURN count(x)
"""
DROP_VECTOR_INDEX = by_prop("DROP VECTOR INDEX FOR (c:Chunk) ON (c.embedding)")
CLEAR_VECTORS = by_prop("""
MATCH (c:Chunk) WHERE c.embedding IS NOT NULL
WITH c LIMIT $batch SET c.embedding = NULL RETURN count(c)
""")
