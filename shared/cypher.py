"""Every Cypher query Zapomni runs, as constants with ``$params``.

Nothing user-supplied is ever formatted into a query string. User metadata is stored as JSON
text (the FalkorDB client does not quote map keys in parameters).
"""

import time

# ---- schema (run once per graph; "already indexed" is fine) ----
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
    "CREATE FULLTEXT INDEX FOR (e:Entity) ON (e.name)",
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
RETURN x.model, x.dim, coalesce(x.prop, 'embedding'), x.next_model, x.next_dim
"""
INDEX_STATUS = "CALL db.indexes() YIELD label, status RETURN label, status"
# the stored shape's version (shared/migrate.py), and its steps
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
READ_MODEL = """
MATCH (x:ZapomniMeta {key: 'embedding'}) RETURN x.model, x.dim, coalesce(x.prop, 'embedding')
"""

# ---- writes ----
# m.task_id / m.gen: the ingest that writes the memory. A newer claim (a higher generation:
# the same text added again after a delete) takes an older writer's leftovers over; an older
# writer never takes them back, so its undo (UNDO_*) cannot remove the newer one's memory
MERGE_MEMORY = """
MERGE (m:Memory {id: $id})
ON CREATE SET m.gen = -1
WITH m, coalesce(m.task_id = $task_id, false) AS same
WHERE same OR $gen > coalesce(m.gen, -1)
SET m.namespace = $namespace, m.content_hash = $content_hash, m.text = $text,
    m.source = $source, m.tags = $tags, m.metadata = $metadata, m.meta_kv = $meta_kv,
    m.created_at = $created_at, m.chunk_count = $chunk_count, m.after = $after,
    m.ready = CASE WHEN same THEN m.ready ELSE false END, m.task_id = $task_id, m.gen = $gen,
    m.landing = CASE WHEN same THEN m.landing ELSE null END,
    m.thread = $thread, m.importance = $importance, m.memory_type = $memory_type,
    m.pinned = $pinned, m.expires_at = $expires_at, m.supersedes = $supersedes,
    m.line_offset = $line_offset, m.occurred_at = coalesce($occurred_at, $created_at),
    m.role = $role
RETURN count(m)
"""

# a thread (metadata "thread"): the memory added before this one, and those added after
# it that a worker wrote first (their m.after names this one)
LINK_TURN_BEFORE = """
MATCH (p:Memory {id: $after}) MATCH (m:Memory {id: $id}) MERGE (p)-[:THEN]->(m)
"""
LINK_TURN_AFTER = """
MATCH (m:Memory {id: $id}) MATCH (n:Memory {after: $id}) MERGE (m)-[:THEN]->(n)
"""

MERGE_CHUNKS = """
MATCH (m:Memory {id: $memory_id})
UNWIND $rows AS r
MERGE (c:Chunk {id: r.id})
SET c.memory_id = $memory_id, c.idx = r.idx, c.text = r.text, c.char_start = r.char_start,
    c.char_end = r.char_end, c.tokens = r.tokens, c.words = r.words,
    c.start_line = r.start_line, c.end_line = r.end_line, c.embedding = vecf32(r.vec)
MERGE (m)-[:HAS_CHUNK]->(c)
"""
# every write or delete of chunks stamps the namespace afresh (a random token, so a graph
# dropped and made again never repeats one): the query service's cache of document
# frequencies (services/query/frequencies.py) is valid only for the stamp it was counted at
STAMP_WRITES = "MERGE (x:ZapomniMeta {key: 'writes'}) SET x.stamp = $stamp"
# what a search reads of its namespace before anything else, in one query: the model
# (READ_MODEL's columns), the write stamp, the chunks (idf's N) and the thread links (THEN
# edges). The counts come from db.meta.stats(), FalkorDB's per-label and per-type counters:
# O(1), as count() over a whole label is on its own (and is not after another clause)
SEARCH_STATE = """
CALL db.meta.stats() YIELD labels, relTypes
OPTIONAL MATCH (x:ZapomniMeta {key: 'embedding'})
OPTIONAL MATCH (w:ZapomniMeta {key: 'writes'})
OPTIONAL MATCH (v:ZapomniMeta {key: 'versions'})
RETURN x.model, x.dim, coalesce(x.prop, 'embedding'), w.stamp,
       coalesce(labels['Chunk'], 0), coalesce(relTypes['THEN'], 0), v IS NOT NULL
"""
# a namespace where update_memory has replaced a memory says so (search then reads older
# versions too, for the current one to inherit what they match: services/query/versions.py)
MARK_VERSIONS = "MERGE (x:ZapomniMeta {key: 'versions'})"

LINK_CHUNKS = """
UNWIND $pairs AS p
MATCH (a:Chunk {id: p[0]})
MATCH (b:Chunk {id: p[1]})
MERGE (a)-[:NEXT]->(b)
"""

MARK_READY = """
MATCH (m:Memory {id: $id}) WHERE m.task_id = $task_id
SET m.ready = true, m.landing = null, m.parts_done = null, m.parts = null
RETURN m.chunk_count
"""
# a part of a new memory has landed: the memory is searchable from now on, as "ingesting",
# with the parts written so far (never fewer than a part that counted later wrote: parts
# land in any order). Not a new version of an updated memory: the old one stays the one
# searched until the new one is complete (MARK_READY, then SUPERSEDE)
MARK_LANDING = """
MATCH (m:Memory {id: $id})
WHERE m.task_id = $task_id AND m.ready = false AND coalesce(m.supersedes, '') = ''
SET m.landing = true, m.parts = $parts,
    m.parts_done = CASE WHEN coalesce(m.parts_done, 0) < $done THEN $done ELSE m.parts_done END
RETURN count(m)
"""

# a delete: the chunks by their memory_id, in batches, then the memory (workers/store.py says
# why in that order)
DELETE_MEMORY = "MATCH (m:Memory {id: $id}) DETACH DELETE m RETURN count(m)"
DELETE_CHUNKS = """
MATCH (c:Chunk {memory_id: $id})
WITH c LIMIT $batch
DETACH DELETE c
RETURN count(c)
"""
MEMORY_CHUNK_IDS = "MATCH (c:Chunk {memory_id: $id}) RETURN c.id"

# an ingest undoing what it wrote: only while the memory is its own (or gone), checked in the
# same query that deletes, so a newer ingest of the same text is never touched
UNDO_MEMORY = """
MATCH (m:Memory {id: $id}) WHERE coalesce(m.task_id, '') = $task_id
DETACH DELETE m RETURN count(m)
"""
# (FalkorDB 4.22 folds "OPTIONAL MATCH ... WITH m WHERE" into the optional match, so that m
# becomes null instead of the row going: measured, it deleted a newer memory's chunks. The
# aggregate keeps the test after the match)
UNDO_CHUNKS = """
OPTIONAL MATCH (m:Memory {id: $id})
WITH count(m) AS memories, collect(coalesce(m.task_id, '')) AS writers
WHERE memories = 0 OR writers[0] = $task_id
MATCH (c:Chunk {memory_id: $id})
WITH c LIMIT $batch
DETACH DELETE c
RETURN count(c)
"""
# the sweep: memories not (yet) searchable, with the task that writes them, a page at a time
# by id from a cursor ($after, exclusive; the "+ ''" copy as in _GRAPH_PICK below)
UNREADY = """
MATCH (m:Memory) WHERE m.id > $after AND m.id + '' > $after AND m.ready = false
  AND m.created_at < $before
RETURN m.id, m.task_id ORDER BY m.id LIMIT $limit
"""

# ---- the knowledge graph (workers/graph.py) ----
# A graph task reads chunks in batches, by id order from a cursor ($after, exclusive) up to
# $last (inclusive): the worker holds one batch of ids, never the namespace's. Which chunks:
# not yet read, or (rebuild) not yet rewritten by this task ($task): a rebuild stamps each
# chunk it rewrites, so a part that runs again skips what it already did.
# FalkorDB 4.22's index range on a string returns extra ids past its bounds (measured: 790
# for 500); the "+ ''" copies are checked exactly, after the index narrowed the scan.
_GRAPH_PICK = """
c.id > $after AND c.id <= $last AND c.id + '' > $after AND c.id + '' <= $last
AND m.ready = true
AND CASE WHEN $rebuild THEN coalesce(c.graph_task, '') <> $task
         ELSE c.entities_at IS NULL END
"""
# the whole namespace: a range scan of the chunk id index
GRAPH_BATCH = (
    "MATCH (m:Memory)-[:HAS_CHUNK]->(c:Chunk) WHERE " + _GRAPH_PICK
    + "RETURN c.id, c.text ORDER BY c.id LIMIT $batch"
)
# some memories (at most 1,000): from each memory to its chunks
GRAPH_BATCH_OF = (
    "UNWIND $memory_ids AS mid MATCH (m:Memory {id: mid})-[:HAS_CHUNK]->(c:Chunk) WHERE "
    + _GRAPH_PICK + "RETURN c.id, c.text ORDER BY c.id LIMIT $batch"
)
# how many chunks a task covers: an aggregate, nothing held but the count
GRAPH_COUNT = """
MATCH (m:Memory)-[:HAS_CHUNK]->(c:Chunk)
WHERE m.ready = true AND ($memory_ids IS NULL OR m.id IN $memory_ids)
  AND ($rebuild OR c.entities_at IS NULL)
RETURN count(c)
"""
# the memories a task of some memories covers, with their sizes, to group them into parts
MEMORY_SIZES = """
UNWIND $memory_ids AS id MATCH (m:Memory {id: id}) WHERE m.ready = true
RETURN m.id, m.chunk_count ORDER BY m.id
"""

# What a chunk contributed, replaced in one statement (atomic in FalkorDB: a crash or a
# cancel leaves either the old contribution or the new, never neither). A chunk records the
# entity pairs it contributed (c.pairs, "id id" strings, bounded per chunk): its old pairs
# take one off their RELATED weight and their evidence, its old MENTIONS go; then its new
# entities, MENTIONS and pairs are written and the chunk is marked (or, $now null: forgotten).
# RELATED.weight counts the chunks whose pairs name the edge; RELATED.evidence keeps the last
# $keep of them. Each MENTIONS keeps the type the chunk gave the entity (see ENTITY_TYPES). An
# edge left at weight 0 goes, and so does an entity no chunk mentions. Writing a chunk twice
# replaces its contribution by the same one: idempotent.
REPLACE_CONTRIBUTIONS = """
UNWIND $chunks AS r
MATCH (c:Chunk {id: r.id})
WITH c, r, coalesce(c.pairs, []) AS old
SET c.pairs = r.pairs, c.entities_at = $now, c.graph_task = $task
WITH collect(c.id) AS ids, collect({id: c.id, old: old}) AS undone
CALL {
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
CALL {
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
CALL {
  WITH undone UNWIND undone AS u UNWIND u.old AS pair
  WITH split(pair, ' ') AS ab
  MATCH (:Entity {id: ab[0]})-[x:RELATED]->(:Entity {id: ab[1]})
  WITH DISTINCT x WHERE x.weight <= 0
  DELETE x
}
CALL {
  WITH touched UNWIND touched AS eid
  MATCH (e:Entity {id: eid}) WHERE NOT (e)<-[:MENTIONS]-(:Chunk)
  DETACH DELETE e
}
RETURN size(ids), relations, touched
"""
# an entity's type: the one most of its mentions give it (the first by name on a tie), set
# again after a batch for every entity it touched (a subquery of the statement above that did
# this saw none of the mentions the statement had just written: FalkorDB 4.22)
ENTITY_TYPES = """
UNWIND $ids AS eid
WITH DISTINCT eid
MATCH (e:Entity {id: eid})<-[r:MENTIONS]-(:Chunk)
WITH e, coalesce(r.type, e.type) AS t, sum(coalesce(r.count, 1)) AS n
ORDER BY n DESC, t
WITH e, collect(t)[0] AS best
SET e.type = best
"""

# a rebuild of the namespace ends by removing entities no chunk mentions (left by versions
# that wrote entities and mentions in separate statements)
DROP_ORPHANS = """
MATCH (e:Entity) WHERE NOT (e)<-[:MENTIONS]-(:Chunk)
WITH e LIMIT $batch
DETACH DELETE e
RETURN count(e)
"""

# ---- reads (run with ro_query) ----
# what any read may return: searchable (complete, or a new memory whose parts are landing:
# MARK_LANDING), not expired (m.expires_at: unix seconds, null for never; $now is the
# reader's clock), and not replaced by a newer version (update_memory) unless $superseded
# asks for those too
_SEARCHABLE = "(m.ready = true OR m.landing = true) AND"
VISIBLE = "\n" + _SEARCHABLE + """ (m.expires_at IS NULL OR m.expires_at > $now)
AND ($superseded OR m.superseded_by IS NULL)
"""


def visible_params(superseded: bool = False) -> dict[str, object]:
    """The parameters of VISIBLE: the clock that expires memories, and whether older versions
    of updated memories count."""
    return {"now": time.time(), "superseded": superseded}


_FILTER = VISIBLE + """
AND ($source IS NULL OR m.source = $source)
AND ($source_prefix IS NULL OR m.source STARTS WITH $source_prefix)
AND ($tags IS NULL OR any(t IN m.tags WHERE t IN $tags))
AND ($tags_all IS NULL OR all(t IN $tags_all WHERE t IN m.tags))
AND ($meta_kv IS NULL OR all(kv IN $meta_kv WHERE kv IN m.meta_kv))
AND ($after IS NULL OR m.occurred_at >= $after)
AND ($before IS NULL OR m.occurred_at < $before)
"""
# what ranking, BM25 and folding need; the memory's fields come for the kept hits only
# (MEMORY_FIELDS): the client parses every cell in Python, ~3 us each
_RETURN_HIT = " RETURN m.id, c.id, c.text, score, c.char_start, c.char_end "
_HIT = _RETURN_HIT + "ORDER BY score ASC, c.id ASC LIMIT $depth "

# approximate: HNSW candidates, then the memory's filters (score is cosine distance)
SEARCH_VECTOR = (
    "CALL db.idx.vector.queryNodes('Chunk', 'embedding', $k, vecf32($vector)) "
    "YIELD node AS c, score "
    "MATCH (m:Memory)-[:HAS_CHUNK]->(c) WHERE " + _FILTER + _HIT
)

# exact: every chunk that passes the filters, scored; for selective filters and small sets
# (a chunk without a vector here is one a reembed wrote with the next model only)
SEARCH_EXACT = (
    "MATCH (m:Memory)-[:HAS_CHUNK]->(c:Chunk) WHERE c.embedding IS NOT NULL AND " + _FILTER
    + "WITH m, c, vec.cosineDistance(c.embedding, vecf32($vector)) AS score " + _HIT
)

# full-text. Each term (a run of letters or digits: services/query/keyword.py, never query
# syntax) is looked up on its own and weighted by its rarity, idf, computed in
# services/query/search.py from KEYWORD_DF: an OR of the terms ranks by the index's own
# score, which let common words win (keyword nDCG@10 on SciFact 0.375 instead of 0.666).
# The sum is done here so that only the best $pool chunks cross the wire (a common word
# matches thousands). $weighted: [term, idf] pairs. Without filters the ready check comes
# after the ranking: one walk to the memory per kept chunk, not per match. Each row also
# names the terms the index matched in it (its stemmer: "configured" finds "configuration").
KEYWORD_POOL = (
    "UNWIND $weighted AS t CALL db.idx.fulltext.queryNodes('Chunk', t[0]) "
    "YIELD node AS c, score MATCH (m:Memory)-[:HAS_CHUNK]->(c) WHERE " + _FILTER
    + "WITH m, c, sum(t[1] * score) AS score, collect(t[0]) AS matched "
    "ORDER BY score DESC, c.id ASC LIMIT $pool" + _RETURN_HIT + ", matched, c.words"
)
KEYWORD_POOL_ALL = (
    "UNWIND $weighted AS t CALL db.idx.fulltext.queryNodes('Chunk', t[0]) "
    "YIELD node AS c, score WITH c, sum(t[1] * score) AS score, collect(t[0]) AS matched "
    "ORDER BY score DESC, c.id ASC LIMIT $over "
    "MATCH (m:Memory)-[:HAS_CHUNK]->(c) WHERE " + VISIBLE
    + "WITH m, c, score, matched ORDER BY score DESC, c.id ASC LIMIT $pool" + _RETURN_HIT
    + ", matched, c.words"
)
# each term's postings, for the query service to choose the pool from (unfiltered searches:
# services/query/postings.py): the node (to group by), the chunk id (ties) and the score
KEYWORD_POSTINGS = (
    "UNWIND $terms AS term CALL db.idx.fulltext.queryNodes('Chunk', term) "
    "YIELD node AS c, score RETURN term, id(c), c.id, score"
)
# the rows of the pool so chosen (services/query/postings.py): $nodes, the chosen chunks'
# node ids, best first; the first $pool of them that are visible, in that order (a chunk's
# text is read for those only). The caller checks each row's c.id against the chunk it chose
# (a node id freed by a delete since the postings were read can name another chunk)
KEYWORD_POOL_ROWS = (
    "UNWIND range(0, size($nodes) - 1) AS i MATCH (c:Chunk) WHERE id(c) = $nodes[i] "
    "WITH i, c MATCH (m:Memory)-[:HAS_CHUNK]->(c) WHERE " + VISIBLE
    + "WITH i, m, c ORDER BY i LIMIT $pool "
    "RETURN $nodes[i], m.id, c.id, c.text, c.char_start, c.char_end, c.words"
)
# how many chunks each term matches: BM25's document frequency, over the whole namespace
# (a few of memories still being ingested too): a filter narrows the results, it does not
# make a word rarer or more common
KEYWORD_DF_ALL = (
    "UNWIND $terms AS term CALL db.idx.fulltext.queryNodes('Chunk', term) YIELD node AS c "
    "RETURN term, count(c)"
)

# conversation context: for each candidate's memory, the memories added just before and
# after it to the same thread (THEN edges; see LINK_TURN_*), and whether it came after.
# One undirected match: a third less server time than two OPTIONAL MATCHes per id
CONTEXT_LINKS = """
UNWIND $ids AS id MATCH (m:Memory {id: id})-[:THEN]-(x:Memory)
RETURN id, x.id, x.after = id
"""
# a neighbour no signal found: its chunk nearest the candidate (the last chunk of the memory
# before, the first of the one after), if it passes the filters. $wanted: [memory id, last?]
CONTEXT_HITS = (
    "UNWIND $wanted AS w MATCH (m:Memory {id: w[0]})-[:HAS_CHUNK]->(c:Chunk) "
    "WHERE c.idx = CASE WHEN w[1] THEN m.chunk_count - 1 ELSE 0 END AND " + _FILTER
    + "WITH m, c, 0.0 AS score" + _RETURN_HIT
)

# event time (services/query/timeline.py): of the candidates' memories, for the time prior;
# and of the best results' memories, with who said them, for currency
EVENT_TIMES = "UNWIND $ids AS id MATCH (m:Memory {id: id}) RETURN m.id, m.occurred_at, m.role"
STATEMENT_FACTS = """
UNWIND $ids AS id MATCH (m:Memory {id: id})
RETURN m.id, m.occurred_at, m.created_at, m.role, coalesce(m.thread, '') <> ''
"""
# how close two passages are in meaning: cosine distance of their vectors, a pair per row
# (written with c. for each vector: cypher_moves.by_prop names the namespace's property)
CHUNK_SIMILARITY = """
UNWIND $pairs AS p MATCH (c:Chunk {id: p[0]}) WITH p, c.embedding AS a
MATCH (c:Chunk {id: p[1]}) RETURN p[0], p[1], vec.cosineDistance(a, c.embedding)
"""

# versions (services/query/versions.py): the memory that replaced each of these, and the
# chunk of a current version at the place of its older version's match ($wanted: [memory id,
# chunk idx]; its first chunk if it has fewer), if it passes the filters
REPLACED_BY = """
UNWIND $ids AS id MATCH (m:Memory {id: id}) WHERE m.superseded_by IS NOT NULL
RETURN m.id, m.superseded_by
"""
VERSION_HITS = (
    "UNWIND $wanted AS w MATCH (m:Memory {id: w[0]})-[:HAS_CHUNK]->(c:Chunk) "
    "WHERE c.idx = CASE WHEN w[1] < m.chunk_count THEN w[1] ELSE 0 END AND " + _FILTER
    + "WITH m, c, 0.0 AS score" + _RETURN_HIT
)

# the lines the kept hits span (null for chunks written before lines were recorded)
CHUNK_LINES = """
UNWIND $ids AS id MATCH (c:Chunk {id: id})
RETURN c.id, c.start_line, c.end_line
"""

# a memory still ingesting: [parts written, parts], null once complete
_LANDED = ("CASE WHEN m.ready THEN null "
           "ELSE [coalesce(m.parts_done, 0), coalesce(m.parts, 0)] END")
# (shape_hit reads these columns; RANK_FIELDS adds to them)
MEMORY_FIELDS = """
UNWIND $ids AS id MATCH (m:Memory {id: id})
RETURN m.id, m.tags, m.source, m.metadata, m.created_at, m.occurred_at, """ + _LANDED

GET_MEMORY = """
MATCH (m:Memory {id: $id})
RETURN m.id, m.text, m.tags, m.source, m.metadata, m.created_at, m.chunk_count, m.ready,
       m.expires_at, m.task_id, """ + _LANDED + ", m.occurred_at"

COUNT_MEMORIES = """
MATCH (m:Memory)
RETURN count(m), sum(CASE WHEN m.ready THEN 0 ELSE 1 END)
"""
COUNT_CHUNKS = "MATCH (c:Chunk) RETURN count(c)"


# ---- the knowledge graph, read ----
COUNT_ENTITIES = """
OPTIONAL MATCH (e:Entity) WITH count(e) AS entities
OPTIONAL MATCH (:Entity)-[x:RELATED]->(:Entity) RETURN entities, count(x)
"""
# $q is query words joined by "|" (services/query/keyword.py: letters and digits only)
ENTITY_TEXT = """
CALL db.idx.fulltext.queryNodes('Entity', $q) YIELD node AS e, score
WITH e, score WHERE $type IS NULL OR e.type = $type
WITH e, score ORDER BY score DESC LIMIT $limit
MATCH (e)<-[m:MENTIONS]-(:Chunk)
RETURN e.id, e.key, e.name, e.type, count(m), score
"""
ENTITY_BY_ID = """
MATCH (e:Entity {id: $id})
OPTIONAL MATCH (e)<-[m:MENTIONS]-(:Chunk)
RETURN e.id, e.key, e.name, e.type, count(m)
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
MATCH (e:Entity {id: $id}) WITH e
MATCH (e)<-[r:MENTIONS]-(c:Chunk) WITH r, c
MATCH (m:Memory)-[:HAS_CHUNK]->(c) WHERE """ + VISIBLE + """
RETURN m.id, c.id, c.text, r.count ORDER BY r.count DESC, c.id LIMIT $limit
"""
ENTITY_DF = """
UNWIND $ids AS id MATCH (e:Entity {id: id}) WITH e, id
OPTIONAL MATCH (e)<-[m:MENTIONS]-(:Chunk)
RETURN id, count(m)
"""
# the entities the passages other signals rank first mention (the graph signal's bridges
# to a second hop), but for those already $known, with how many chunks mention each
SEED_ENTITIES = """
UNWIND $ids AS id MATCH (:Chunk {id: id})-[:MENTIONS]->(e:Entity)
WITH DISTINCT e WHERE NOT e.id IN $known
MATCH (e)<-[m:MENTIONS]-(:Chunk)
RETURN e.id, count(m)
"""
# the graph signal: chunks scored by the entities they mention. $weighted: [entity id,
# weight (its idf, halved for a neighbour or bridge), bridge?]; a bridge (an entity of one of
# the $seeds passages) scores nothing in those passages. A mention counted twice is worth
# 1.33 (saturating at 2), as in BM25. Scored here: the client would parse every posting
GRAPH_HITS = (
    "UNWIND $weighted AS t MATCH (e:Entity {id: t[0]}) WITH e, t "
    "MATCH (e)<-[r:MENTIONS]-(c:Chunk) WHERE NOT (t[2] AND c.id IN $seeds) "
    "WITH c, sum(t[1] * 2.0 * coalesce(r.count, 1) / (coalesce(r.count, 1) + 1.0)) AS score "
    "MATCH (m:Memory)-[:HAS_CHUNK]->(c) WHERE " + _FILTER
    + "WITH m, c, score ORDER BY score DESC, c.id ASC LIMIT $depth" + _RETURN_HIT
)
CHUNK_ENTITY_NAMES = """
UNWIND $ids AS id MATCH (:Chunk {id: id})-[r:MENTIONS]->(e:Entity)
RETURN id, e.name, r.count
"""


# ---- update (update_memory: metadata in place, versions) ----
# a metadata change, in place: the whole new metadata with the columns derived from it, as
# an ingest writes them (workers/store.py). MATCH, never MERGE: an update never brings back a
# deleted memory; only a searchable one is changed
UPDATE_METADATA = """
MATCH (m:Memory {id: $id}) WHERE m.ready = true
SET m.tags = $tags, m.source = $source, m.metadata = $metadata, m.meta_kv = $meta_kv,
    m.importance = $importance, m.memory_type = $memory_type, m.pinned = $pinned,
    m.expires_at = $expires_at, m.occurred_at = coalesce($occurred_at, m.created_at),
    m.role = $role
RETURN count(m)
"""
# a new version has become searchable: it replaces $old, unless another version replaced
# $old first (two updates of one version at once); then that one's id comes back, and the
# new version replaces the newest instead (workers/store.py walks the chain). One statement:
# both properties change together
SUPERSEDE = """
MATCH (o:Memory {id: $old}) MATCH (m:Memory {id: $id})
WITH o, m, o.superseded_by AS was
WITH o, m, was, was IS NULL OR was = $id AS free
SET o.superseded_by = CASE WHEN free THEN $id ELSE was END,
    m.supersedes = CASE WHEN free THEN $old ELSE m.supersedes END
RETURN was
"""
VERSION_OF = "MATCH (m:Memory {id: $id}) RETURN m.supersedes"
# a version deleted (or undone) leaves the chain closed around it: the one before it is
# replaced by the one after it (or is current again), the one after it replaces the one
# before. $task_id: only while that ingest wrote the memory (an undo); null for a delete
SPLICE_BEFORE = """
MATCH (m:Memory {id: $id})
WHERE m.supersedes <> '' AND ($task_id IS NULL OR m.task_id = $task_id)
MATCH (o:Memory {id: m.supersedes}) WHERE o.superseded_by = $id
SET o.superseded_by = m.superseded_by
"""
SPLICE_AFTER = """
MATCH (m:Memory {id: $id})
WHERE m.superseded_by IS NOT NULL AND ($task_id IS NULL OR m.task_id = $task_id)
MATCH (n:Memory {id: m.superseded_by}) WHERE n.supersedes = $id
SET n.supersedes = m.supersedes
"""
# get_memory's versions: one step along the chain (a read)
VERSION_STEP = """
MATCH (m:Memory {id: $id})
RETURN m.id, m.supersedes, m.superseded_by, m.created_at, m.ready
"""

# ---- lifecycle: list_memories and the expiry sweep ----
# what list_memories shows: what VISIBLE shows (not expired, not an older version unless
# asked for) and memories still being ingested (their state says so), with search's filters
_LISTED = VISIBLE.replace(_SEARCHABLE, "", 1) + _FILTER.removeprefix(VISIBLE)
# A page is ordered by event time (occurred_at), then creation time, then id, and cut by
# keyset after the last row of the page before ($us, $cu, $id; for the first page, a key
# past every memory). FalkorDB returns doubles with 15 significant digits, so the keys are
# times in whole microseconds (exact). Only the page's memories are projected (ORDER BY +
# LIMIT first), their text up to $head characters. *_IN reads a window of occurred_at, $lo
# to $hi, through its index, and services/query/listing.py widens the window until it holds
# a page; *_ALL reads every memory that passes the filters (measured at 50k memories: ~7 ms
# for a window of a page, ~80 ms for all)
_LIST_KEY = (" WITH m, toInteger(m.occurred_at * 1000000) AS us, "
             "toInteger(m.created_at * 1000000) AS cu ")
_LIST_ROW = (" RETURN m.id, us, cu, substring(m.text, 0, $head), m.tags, m.source, "
             "m.metadata, m.created_at, m.chunk_count, m.ready, coalesce(m.task_id, ''), "
             "m.occurred_at")
_LIST_WINDOW = "m.occurred_at >= $lo AND m.occurred_at <= $hi AND "
_LIST_NEWER = ("WHERE us < $us OR (us = $us AND (cu < $cu OR (cu = $cu AND m.id < $id))) "
               "WITH m, us, cu ORDER BY us DESC, cu DESC, m.id DESC LIMIT $limit")
_LIST_OLDER = ("WHERE us > $us OR (us = $us AND (cu > $cu OR (cu = $cu AND m.id > $id))) "
               "WITH m, us, cu ORDER BY us, cu, m.id LIMIT $limit")
LIST_NEWEST_ALL = "MATCH (m:Memory) WHERE " + _LISTED + _LIST_KEY + _LIST_NEWER + _LIST_ROW
LIST_NEWEST_IN = ("MATCH (m:Memory) WHERE " + _LIST_WINDOW + _LISTED + _LIST_KEY + _LIST_NEWER
                  + _LIST_ROW)
LIST_OLDEST_ALL = "MATCH (m:Memory) WHERE " + _LISTED + _LIST_KEY + _LIST_OLDER + _LIST_ROW
LIST_OLDEST_IN = ("MATCH (m:Memory) WHERE " + _LIST_WINDOW + _LISTED + _LIST_KEY + _LIST_OLDER
                  + _LIST_ROW)

# the expiry sweep: searchable memories whose time has come, by id from a cursor ($after,
# exclusive), with the ingest that wrote them. Never a pinned one (validation refuses
# pinned with expires_at; this is the guard for a memory changed since). One still being
# ingested waits for its ingest to end (the unready sweep removes what a failed one left).
# "m.id + ''" keeps the planner on the expires_at index: on m.id it scanned the id index
# from the cursor on, every memory (measured at 50k memories, 1% expired: 183 ms, not 2 ms)
EXPIRED = """
MATCH (m:Memory) WHERE m.expires_at <= $now AND m.ready = true
  AND coalesce(m.pinned, false) = false AND m.id + '' > $after
RETURN m.id, coalesce(m.task_id, ''), m.expires_at ORDER BY m.id LIMIT $limit
"""

# ---- rank: access tracking and search's rank="memory" ----
# Access events (services/query/rank.py records them on a Redis stream; workers/access.py
# folds them) added to each memory's count and last-returned time, in one statement per
# namespace and batch. $events: [key, [memory ids], unix seconds] with keys that sort as the
# stream does (shared/access.py). The namespace's watermark (x.folded: the last key folded)
# is moved in the same statement: a FalkorDB query is applied whole or not at all, so a fold
# that ends before it trims the stream reads the same events again and counts none twice.
FOLD_ACCESS = """
MERGE (x:ZapomniMeta {key: 'access'})
WITH x, coalesce(x.folded, '') AS seen
UNWIND $events AS e
WITH x, e WHERE e[0] > seen
WITH x, max(e[0]) AS last, collect(e) AS fresh
SET x.folded = last
WITH fresh UNWIND fresh AS e UNWIND e[1] AS id
WITH id, count(*) AS n, max(e[2]) AS at
MATCH (m:Memory {id: id})
SET m.access_count = coalesce(m.access_count, 0) + n,
    m.accessed_at = CASE WHEN coalesce(m.accessed_at, 0) < at THEN at ELSE m.accessed_at END
RETURN count(m)
"""
# what rank="memory" reads of the candidates' memories: MEMORY_FIELDS and the memory's parts
RANK_FIELDS = MEMORY_FIELDS + ", m.importance, m.access_count, m.accessed_at"

# ---- context: a thread's turns (get_history, build_context) ----
# the newest $limit turns of a thread (m.thread, indexed) by event time, then time added,
# then id, before the cursor ($before_us, $before_cu, $before_id: the oldest turn already
# seen; null for the newest), newest first, complete ones only (not one whose parts are
# still landing). Times are compared as whole microseconds computed here: a float read back
# by the client has lost digits, so a page would overlap the one before. Texts are cut to
# $chars here, so a long memory in a thread never crosses the wire whole
THREAD_TURNS = """
MATCH (m:Memory) WHERE m.thread = $thread AND """ + VISIBLE.replace(
    _SEARCHABLE, "m.ready = true AND", 1) + """
WITH m, toInteger(m.occurred_at * 1000000) AS us, toInteger(m.created_at * 1000000) AS cu
WHERE $before_us IS NULL OR us < $before_us
   OR (us = $before_us AND (cu < $before_cu OR (cu = $before_cu AND m.id < $before_id)))
RETURN m.id, substring(m.text, 0, $chars), size(m.text), m.metadata, m.created_at,
       m.memory_type, m.importance, us, cu, m.occurred_at
ORDER BY us DESC, cu DESC, m.id DESC LIMIT $limit
"""
