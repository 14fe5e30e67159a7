"""The Cypher of reads by order rather than by relevance: list_memories' pages, the
expiry sweep's page, rank's fields and a thread's turns."""

from __future__ import annotations

from zapomni.shared.store.cypher_search import FILTER, MEMORY_FIELDS, SEARCHABLE, VISIBLE

# what list_memories shows: what VISIBLE shows (not expired, not an older version unless
# asked for) and memories still being ingested (their state says so), with search's filters
_LISTED = VISIBLE.replace(SEARCHABLE, "", 1) + FILTER.removeprefix(VISIBLE)
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

# what rank="memory" reads of the candidates' memories: MEMORY_FIELDS and the memory's parts
RANK_FIELDS = MEMORY_FIELDS + ", m.importance, m.access_count, m.accessed_at"

# the newest $limit turns of a thread (m.thread, indexed) by event time, then time added,
# then id, before the cursor ($before_us, $before_cu, $before_id: the oldest turn already
# seen; null for the newest), newest first, complete ones only (not one whose parts are
# still landing). Times are compared as whole microseconds computed here: a float read back
# by the client has lost digits, so a page would overlap the one before. Texts are cut to
# $chars here, so a long memory in a thread never crosses the wire whole
THREAD_TURNS = """
MATCH (m:Memory) WHERE m.thread = $thread AND """ + VISIBLE.replace(
    SEARCHABLE, "m.ready = true AND", 1) + """
WITH m, toInteger(m.occurred_at * 1000000) AS us, toInteger(m.created_at * 1000000) AS cu
WHERE $before_us IS NULL OR us < $before_us
   OR (us = $before_us AND (cu < $before_cu OR (cu = $before_cu AND m.id < $before_id)))
RETURN m.id, substring(m.text, 0, $chars), size(m.text), m.metadata, m.created_at,
       m.memory_type, m.importance, us, cu, m.occurred_at
ORDER BY us DESC, cu DESC, m.id DESC LIMIT $limit
"""
