"""Every Cypher query Zapomni runs, as constants with ``$params``.

Nothing user-supplied is ever formatted into a query string. User metadata is stored as JSON
text (the FalkorDB client does not quote map keys in parameters).
"""

# ---- schema (run once per graph; "already indexed" is fine) ----
SCHEMA = (
    "CREATE INDEX FOR (m:Memory) ON (m.id)",
    "CREATE INDEX FOR (m:Memory) ON (m.created_at)",
    "CREATE INDEX FOR (m:Memory) ON (m.source)",
    "CREATE INDEX FOR (m:Memory) ON (m.content_hash)",
    "CREATE INDEX FOR (c:Chunk) ON (c.id)",
    "CREATE INDEX FOR (c:Chunk) ON (c.memory_id)",
    "CREATE FULLTEXT INDEX FOR (c:Chunk) ON (c.text)",
)
# dimension and HNSW options are integers from Settings, passed as parameters
VECTOR_INDEX = (
    "CREATE VECTOR INDEX FOR (c:Chunk) ON (c.embedding) OPTIONS {dimension: $dim, "
    "similarityFunction: 'cosine', M: $m, efConstruction: $ef_construction, "
    "efRuntime: $ef_runtime}"
)

# the embedding model that built a namespace: recorded once, checked on every write
CLAIM_MODEL = """
MERGE (x:ZapomniMeta {key: 'embedding'})
ON CREATE SET x.model = $model, x.dim = $dim, x.created_at = $now
RETURN x.model, x.dim
"""
READ_MODEL = "MATCH (x:ZapomniMeta {key: 'embedding'}) RETURN x.model, x.dim"

# ---- writes ----
MERGE_MEMORY = """
MERGE (m:Memory {id: $id})
ON CREATE SET m.namespace = $namespace, m.content_hash = $content_hash, m.text = $text,
              m.source = $source, m.tags = $tags, m.metadata = $metadata,
              m.meta_kv = $meta_kv, m.created_at = $created_at,
              m.chunk_count = $chunk_count, m.ready = false
"""

MERGE_CHUNKS = """
MATCH (m:Memory {id: $memory_id})
UNWIND $rows AS r
MERGE (c:Chunk {id: r.id})
SET c.memory_id = $memory_id, c.idx = r.idx, c.text = r.text, c.char_start = r.char_start,
    c.char_end = r.char_end, c.tokens = r.tokens, c.embedding = vecf32(r.vec)
MERGE (m)-[:HAS_CHUNK]->(c)
"""

LINK_CHUNKS = """
UNWIND $pairs AS p
MATCH (a:Chunk {id: p[0]})
MATCH (b:Chunk {id: p[1]})
MERGE (a)-[:NEXT]->(b)
"""

MARK_READY = "MATCH (m:Memory {id: $id}) SET m.ready = true RETURN m.chunk_count"

DELETE_CHUNKS = """
MATCH (c:Chunk {memory_id: $id})
WITH c LIMIT $batch
DETACH DELETE c
RETURN count(c)
"""
DELETE_MEMORY = "MATCH (m:Memory {id: $id}) DETACH DELETE m RETURN count(m)"

# ---- reads (run with ro_query) ----
_FILTER = """
m.ready = true
AND ($source IS NULL OR m.source = $source)
AND ($tags IS NULL OR any(t IN m.tags WHERE t IN $tags))
AND ($tags_all IS NULL OR all(t IN $tags_all WHERE t IN m.tags))
AND ($meta_kv IS NULL OR all(kv IN $meta_kv WHERE kv IN m.meta_kv))
AND ($after IS NULL OR m.created_at >= $after)
AND ($before IS NULL OR m.created_at < $before)
"""
_RETURN_HIT = """
RETURN m.id, c.id, c.text, score, c.char_start, c.char_end, m.tags, m.source, m.metadata,
       m.created_at
"""
_HIT = _RETURN_HIT + "ORDER BY score ASC, c.id ASC LIMIT $depth "

# approximate: HNSW candidates, then the memory's filters (score is cosine distance)
SEARCH_VECTOR = (
    "CALL db.idx.vector.queryNodes('Chunk', 'embedding', $k, vecf32($vector)) "
    "YIELD node AS c, score "
    "MATCH (m:Memory)-[:HAS_CHUNK]->(c) WHERE " + _FILTER + _HIT
)

# exact: every chunk that passes the filters, scored; for selective filters and small sets
SEARCH_EXACT = (
    "MATCH (m:Memory)-[:HAS_CHUNK]->(c:Chunk) WHERE " + _FILTER
    + "WITH m, c, vec.cosineDistance(c.embedding, vecf32($vector)) AS score " + _HIT
)

# full-text, one term at a time (services/query/search.py weighs terms by their rarity:
# FalkorDB's own score is term frequency without inverse document frequency). The term is
# one run of letters or digits (services/query/keyword.py), never query syntax.
KEYWORD_TERM = (
    "CALL db.idx.fulltext.queryNodes('Chunk', $term) YIELD node AS c, score "
    "MATCH (m:Memory)-[:HAS_CHUNK]->(c) WHERE " + _FILTER
    + "RETURN c.id, score LIMIT $postings"
)
HITS_BY_ID = (
    "UNWIND $ids AS id MATCH (c:Chunk {id: id}) MATCH (m:Memory)-[:HAS_CHUNK]->(c) "
    "WITH m, c, 0.0 AS score " + _RETURN_HIT
)

GET_MEMORY = """
MATCH (m:Memory {id: $id})
RETURN m.id, m.text, m.tags, m.source, m.metadata, m.created_at, m.chunk_count, m.ready
"""

COUNT_MEMORIES = """
MATCH (m:Memory)
RETURN count(m), sum(CASE WHEN m.ready THEN 0 ELSE 1 END)
"""
COUNT_CHUNKS = "MATCH (c:Chunk) RETURN count(c)"
