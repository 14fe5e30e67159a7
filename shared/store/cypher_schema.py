"""The Cypher of a namespace as a whole: its indexes, its stored shape's version and the
steps that migrate it (shared/store/migrate.py), its embedding model and what a
search reads of it first.

Every Cypher query Zapomni runs is a constant with ``$params`` in a module of this package
(by area: cypher_schema, cypher_memories, cypher_graph, cypher_search, cypher_lists,
cypher_batch, cypher_moves). Nothing user-supplied is ever formatted into a query string.
User metadata is stored as JSON text (the FalkorDB client does not quote map keys in
parameters).
"""

from __future__ import annotations

# Run before the first MERGE: FalkorDB's concurrent MERGEs of a label the graph does not know
# yet each create their node (measured: 16 at once on a fresh graph made 2-16 copies of the
# namespace's ZapomniMeta record); once the label exists, a MERGE finds the other's node
SCHEMA = (
    "CREATE INDEX FOR (x:ZapomniMeta) ON (x.key)",
    "CREATE INDEX FOR (m:Memory) ON (m.id)",
    "CREATE INDEX FOR (m:Memory) ON (m.created_at)",
    "CREATE INDEX FOR (m:Memory) ON (m.occurred_at)",
    "CREATE INDEX FOR (m:Memory) ON (m.source)",
    "CREATE INDEX FOR (m:Memory) ON (m.content_hash)",
    "CREATE INDEX FOR (m:Memory) ON (m.after)",
    "CREATE INDEX FOR (m:Memory) ON (m.thread)",
    "CREATE INDEX FOR (m:Memory) ON (m.expires_at)",
    "CREATE INDEX FOR (c:Chunk) ON (c.id)",
    "CREATE INDEX FOR (c:Chunk) ON (c.memory_id)",
    "CREATE FULLTEXT INDEX FOR (c:Chunk) ON (c.text)",
    "CREATE INDEX FOR (e:Entity) ON (e.id)",
    "CREATE INDEX FOR (e:Entity) ON (e.first)",  # the people a one-word name may be
    "CREATE INDEX FOR (e:Entity) ON (e.last)",  # (shared/store/cypher_alias.py)
    "CREATE FULLTEXT INDEX FOR (e:Entity) ON (e.name)",
    # code symbols (shared/store/cypher_code.py): their names' words and docstrings' first
    # sentences, and the names a chunk refers to, on its HAS_CHUNK edge (an array:
    # `name IN h.code_targets` is an index scan)
    "CREATE FULLTEXT INDEX FOR (e:Entity) ON (e.words)",
    "CREATE FULLTEXT INDEX FOR (e:Entity) ON (e.summary)",
    "CREATE INDEX FOR ()-[h:HAS_CHUNK]-() ON (h.code_targets)",
)
EDGE_TARGETS = SCHEMA[-1]  # (created by version 4's migration too: shared/store/migrate.py)
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
RETURN x.model, x.dim, coalesce(x.prop, 'embedding'), x.next_model, x.next_dim
"""
INDEX_STATUS = "CALL db.indexes() YIELD label, status RETURN label, status"
# the stored shape's version (shared/store/migrate.py), and its steps
READ_SCHEMA = "MATCH (x:ZapomniMeta {key: 'schema'}) RETURN x.version"
WRITE_SCHEMA = "MERGE (x:ZapomniMeta {key: 'schema'}) SET x.version = $version"
MIGRATE_EVENT_TIME = """
MATCH (m:Memory) WHERE m.occurred_at IS NULL
WITH m LIMIT $batch
SET m.occurred_at = m.created_at
RETURN count(m)
"""
MIGRATE_VERSIONS_MARK = """
OPTIONAL MATCH (m:Memory) WHERE m.superseded_by IS NOT NULL
WITH count(m) AS replaced WHERE replaced > 0
MERGE (x:ZapomniMeta {key: 'versions'})
RETURN 0
"""
# version 3: an entity's type is shown only where it holds (a person its mentions agree on, a
# place a gazetteer has: workers/entity_types.py), and what the model said is kept apart in
# ner_type. Entities written before keep the model's majority type as ner_type and show none
# until a rebuild (build_graph rebuild=true) types them, and links one-word aliases, again;
# symbols of code (exact, from the syntax tree) did not exist before version 3
MIGRATE_ENTITY_TYPES = """
MATCH (e:Entity) WHERE e.ner_type IS NULL
  AND NOT e.type IN ['module', 'class', 'function', 'method', 'constant']
WITH e LIMIT $batch
SET e.ner_type = e.type, e.type = 'unknown'
RETURN count(e)
"""
# version 4: a chunk's graph state (what a graph build read and wrote: entities_at,
# graph_task, pairs, code_targets) moves from the chunk to its HAS_CHUNK edge, where setting
# it indexes nothing heavy (cypher_graph says why). One statement a batch moves and removes
# together, so a step cut short leaves each chunk's marks in one place or the other, never
# lost; an edge's own value (none, unless written since) wins. The chunk index on
# code_targets goes first (DROP_CHUNK_TARGETS: it would be updated by every removal)
DROP_CHUNK_TARGETS = "DROP INDEX FOR (c:Chunk) ON (c.code_targets)"
MIGRATE_MARKS = """
MATCH (c:Chunk)<-[h:HAS_CHUNK]-()
WHERE c.entities_at IS NOT NULL OR c.graph_task IS NOT NULL OR c.pairs IS NOT NULL
   OR c.code_targets IS NOT NULL
WITH c, h LIMIT $batch
SET h.entities_at = coalesce(h.entities_at, c.entities_at),
    h.graph_task = coalesce(h.graph_task, c.graph_task), h.pairs = coalesce(h.pairs, c.pairs),
    h.code_targets = coalesce(h.code_targets, c.code_targets),
    c.entities_at = null, c.graph_task = null, c.pairs = null, c.code_targets = null
RETURN count(c)
"""
READ_MODEL = """
MATCH (x:ZapomniMeta {key: 'embedding'}) RETURN x.model, x.dim, coalesce(x.prop, 'embedding')
"""

# what a search reads of its namespace before anything else, in one query: the model
# (READ_MODEL's columns), the chunks (idf's N) and the thread links (THEN
# edges). The counts come from db.meta.stats(), FalkorDB's per-label and per-type counters:
# O(1), as count() over a whole label is on its own (and is not after another clause)
SEARCH_STATE = """
CALL db.meta.stats() YIELD labels, relTypes
OPTIONAL MATCH (x:ZapomniMeta {key: 'embedding'})
OPTIONAL MATCH (v:ZapomniMeta {key: 'versions'})
OPTIONAL MATCH (k:ZapomniMeta {key: 'code'})
RETURN x.model, x.dim, coalesce(x.prop, 'embedding'),
       coalesce(labels['Chunk'], 0), coalesce(relTypes['THEN'], 0), v IS NOT NULL,
       k IS NOT NULL
"""
# a namespace where symbols of source code were written says so (search then looks for the
# symbols a question names: services/query/symbols.py; a prose namespace saves that read)
MARK_CODE = "MERGE (x:ZapomniMeta {key: 'code'})"
# a namespace where update_memory has replaced a memory says so (search then reads older
# versions too, for the current one to inherit what they match: services/query/versions.py)
MARK_VERSIONS = "MERGE (x:ZapomniMeta {key: 'versions'})"

# version 5 (shared/store/postings.py backfill): the last node id of a chunk, and the chunks
# among a range of node ids (FalkorDB seeks a range of ids, it does not scan the label)
MAX_CHUNK_NODE = "MATCH (c:Chunk) RETURN max(id(c))"
CHUNKS_BY_NODE = "MATCH (c:Chunk) WHERE id(c) >= $from AND id(c) < $to RETURN c.id, c.text"
# version 5 also drops the write stamp (ZapomniMeta 'writes'): its readers, the query
# service's caches of document frequencies and postings, are gone
MIGRATE_DROP_STAMP = """
MATCH (x:ZapomniMeta {key: 'writes'}) WITH x LIMIT $batch DELETE x RETURN count(x)
"""
