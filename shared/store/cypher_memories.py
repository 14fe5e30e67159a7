"""The Cypher of writing memories and their chunks: the ingest's writes, its undo and the
sweep's page of not-ready memories, deletes, updates (metadata in place, versions) and the
access counts folded in (cypher_schema says how the queries are laid out)."""

from __future__ import annotations

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

# the ids of the chunks written: none when the memory is gone (deleted while its text was
# embedded; the keyword postings forget what they numbered: workers/store.py)
MERGE_CHUNKS = """
MATCH (m:Memory {id: $memory_id})
UNWIND $rows AS r
MERGE (c:Chunk {id: r.id})
SET c.memory_id = $memory_id, c.idx = r.idx, c.text = r.text, c.char_start = r.char_start,
    c.char_end = r.char_end, c.tokens = r.tokens, c.words = r.words,
    c.start_line = r.start_line, c.end_line = r.end_line, c.embedding = vecf32(r.vec)
MERGE (m)-[:HAS_CHUNK]->(c)
RETURN c.id
"""

# claims of chunks whose writer did not settle them (shared/store/compaction.py, reconcile):
# is each chunk there, is its memory
PENDING_WRITTEN = """
UNWIND $rows AS r
OPTIONAL MATCH (c:Chunk {id: r.chunk})
OPTIONAL MATCH (m:Memory {id: r.memory})
RETURN r.chunk, c IS NOT NULL, m IS NOT NULL
"""

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
# a memory's chunks are deleted a batch at a time: read (id and text: the keyword postings
# forget them first, shared/store/postings.py), then deleted by id
CHUNKS_TO_DELETE = "MATCH (c:Chunk {memory_id: $id}) RETURN c.id, c.text LIMIT $batch"
DELETE_CHUNKS = """
UNWIND $ids AS cid MATCH (c:Chunk {id: cid})
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
_UNDOING = """
OPTIONAL MATCH (m:Memory {id: $id})
WITH count(m) AS memories, collect(coalesce(m.task_id, '')) AS writers
WHERE memories = 0 OR writers[0] = $task_id
"""
UNDO_CHUNKS_TO_DELETE = (_UNDOING
                         + "MATCH (c:Chunk {memory_id: $id}) RETURN c.id, c.text LIMIT $batch")
UNDO_CHUNKS = _UNDOING + """UNWIND $ids AS cid MATCH (c:Chunk {id: cid})
DETACH DELETE c
RETURN count(c)
"""
# the chunks of a memory the undo may remove (as UNDO_CHUNKS) that have a contribution to the
# graph (an import writes it before its memories are searchable), to take it back first
UNDO_READ_CHUNKS = """
OPTIONAL MATCH (m:Memory {id: $id})
WITH count(m) AS memories, collect(coalesce(m.task_id, '')) AS writers
WHERE memories = 0 OR writers[0] = $task_id
MATCH (c:Chunk {memory_id: $id})<-[h:HAS_CHUNK]-() WHERE h.entities_at IS NOT NULL
RETURN c.id
"""
# the sweep: memories not (yet) searchable, with the task that writes them, a page at a time
# by id from a cursor ($after, exclusive; the "+ ''" copy as in _GRAPH_PICK below)
UNREADY = """
MATCH (m:Memory) WHERE m.id > $after AND m.id + '' > $after AND m.ready = false
  AND m.created_at < $before
RETURN m.id, m.task_id ORDER BY m.id LIMIT $limit
"""

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

# Access events (services/query/rank.py records them on a Redis stream; workers/access.py
# folds them) added to each memory's count and last-returned time, in one statement per
# namespace and batch. $events: [key, [memory ids], unix seconds] with keys that sort as the
# stream does (shared/store/access.py). The namespace's watermark (x.folded: the last key folded)
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
