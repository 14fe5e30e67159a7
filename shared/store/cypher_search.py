"""The Cypher of search's reads (run with ro_query): what is visible, the vector, exact and
keyword signals, context hits, versions and the memory record."""

from __future__ import annotations

import time

# what any read may return: searchable (complete, or a new memory whose parts are landing:
# MARK_LANDING), not expired (m.expires_at: unix seconds, null for never; $now is the
# reader's clock), and not replaced by a newer version (update_memory) unless $superseded
# asks for those too
SEARCHABLE = "(m.ready = true OR m.landing = true) AND"
VISIBLE = "\n" + SEARCHABLE + """ (m.expires_at IS NULL OR m.expires_at > $now)
AND ($superseded OR m.superseded_by IS NULL)
"""


def visible_params(superseded: bool = False) -> dict[str, object]:
    """The parameters of VISIBLE: the clock that expires memories, and whether older versions
    of updated memories count."""
    return {"now": time.time(), "superseded": superseded}


FILTER = VISIBLE + """
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
RETURN_HIT = " RETURN m.id, c.id, c.text, score, c.char_start, c.char_end "
_HIT = RETURN_HIT + "ORDER BY score ASC, c.id ASC LIMIT $depth "

# approximate: HNSW candidates, then the memory's filters (score is cosine distance)
SEARCH_VECTOR = (
    "CALL db.idx.vector.queryNodes('Chunk', 'embedding', $k, vecf32($vector)) "
    "YIELD node AS c, score "
    "MATCH (m:Memory)-[:HAS_CHUNK]->(c) WHERE " + FILTER + _HIT
)

# exact: every chunk that passes the filters, scored; for selective filters and small sets
# (a chunk without a vector here is one a reembed wrote with the next model only)
SEARCH_EXACT = (
    "MATCH (m:Memory)-[:HAS_CHUNK]->(c:Chunk) WHERE c.embedding IS NOT NULL AND " + FILTER
    + "WITH m, c, vec.cosineDistance(c.embedding, vecf32($vector)) AS score " + _HIT
)

# full-text. Each term (a run of letters or digits: services/query/keyword.py, never query
# syntax) is looked up on its own and weighted by its rarity, idf, computed in
# services/query/search.py from KEYWORD_DF: an OR of the terms ranks by the index's own
# score, which let common words win (keyword nDCG@10 on SciFact 0.375 instead of 0.666).
# With filters the sum is done here so that only the best $pool chunks cross the wire (a
# common word matches thousands; without filters: KEYWORD_TOP). $weighted: [term, idf]
# pairs. Each row also names the terms the index matched in it (its stemmer: "configured"
# finds "configuration").
KEYWORD_POOL = (
    "UNWIND $weighted AS t CALL db.idx.fulltext.queryNodes('Chunk', t[0]) "
    "YIELD node AS c, score MATCH (m:Memory)-[:HAS_CHUNK]->(c) WHERE " + FILTER
    + "WITH m, c, sum(t[1] * score) AS score, collect(t[0]) AS matched "
    "ORDER BY score DESC, c.id ASC LIMIT $pool" + RETURN_HIT + ", matched, c.words"
)
# the rows of the keyword pool's chunks (services/query/postings.py): $ids, chunk ids, best
# first; those visible (a chunk's text is read for those only). The caller checks each text
# against the postings' CRC and keeps the order
KEYWORD_POOL_ROWS = (
    "UNWIND $ids AS cid MATCH (c:Chunk {id: cid}) WITH c "
    "MATCH (m:Memory)-[:HAS_CHUNK]->(c) WHERE " + VISIBLE
    + "RETURN m.id, c.id, c.text, c.char_start, c.char_end, c.words"
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
    "WHERE c.idx = CASE WHEN w[1] THEN m.chunk_count - 1 ELSE 0 END AND " + FILTER
    + "WITH m, c, 0.0 AS score" + RETURN_HIT
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
    "WHERE c.idx = CASE WHEN w[1] < m.chunk_count THEN w[1] ELSE 0 END AND " + FILTER
    + "WITH m, c, 0.0 AS score" + RETURN_HIT
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
