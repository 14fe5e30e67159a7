"""The Cypher of the code graph (workers/code_graph.py writes it, services/query/symbols.py
reads it): symbols of source code as Entity nodes, keyed by their dotted name.

A code Entity has ``key`` = ``name`` = the dotted name, ``type`` = its kind
(shared/text/entities.py CODE_TYPES), ``source`` (the memory's source path),
``start_line``, ``end_line``, ``words`` (the name's words, for the full-text index:
``run_until_complete`` is one token there, "run", "until" and "complete" are words) and
``summary`` (its docstring's first sentence, also in the full-text index).
The chunk that holds a definition's first line MENTIONS it with ``role`` "defines"; a chunk
that refers to a symbol some file of the namespace defines MENTIONS it with ``role`` "uses",
its ``count`` of references and their ``lines``. Relations between symbols are RELATED edges
with a ``kind`` (defines, imports, inherits, calls, uses), counted and undone per chunk
exactly as the prose graph's pairs are (cypher_graph.REPLACE_CONTRIBUTIONS), so a rebuild,
a re-ingest and a delete treat both alike. A chunk keeps ``code_targets`` (on its HAS_CHUNK
edge, with the rest of its graph state: cypher_graph says why): every dotted name it refers
to, defined anywhere yet or not (an array index on the edge), so a file read later links the
chunks already written that call into it.
"""

from __future__ import annotations

from zapomni.shared.store import cypher_graph
from zapomni.shared.store.cypher_search import VISIBLE

# a code memory's text, where it came from and where its chunks start
CODE_MEMORY = """
MATCH (m:Memory {id: $id}) WITH m
MATCH (m)-[:HAS_CHUNK]->(c:Chunk)
RETURN m.text, m.source, m.metadata, coalesce(m.line_offset, 0),
       collect([c.id, c.start_line])
"""
# the symbols that already exist, before a batch writes (the names it defines anew are
# followed by PENDING)
EXISTING = "UNWIND $ids AS id MATCH (e:Entity {id: id}) RETURN e.id"
# chunks written before a symbol existed that refer to it and do not mention it yet
# ([key, id] pairs; the array index on HAS_CHUNK's code_targets finds them. The edge's ends
# carry no label: with (c:Chunk), FalkorDB 4.22 scans every chunk and the index for each,
# measured 280 ms at 20k chunks against 0.03 ms without)
PENDING = """
UNWIND $symbols AS s
MATCH ()-[h:HAS_CHUNK]->(c) WHERE s[0] IN h.code_targets
WITH c, s MATCH (e:Entity {id: s[1]}) WHERE NOT (c)-[:MENTIONS]->(e)
RETURN DISTINCT c.id LIMIT $limit
"""

# What code chunks contribute, replaced in one statement, as REPLACE_CONTRIBUTIONS does for
# prose (see there): old pairs undone, old MENTIONS gone, then the definitions MERGEd with
# their place (the last writer's), the mentions of definitions and of every referred name
# that exists at this moment (inside the statement: a file written at the same time by
# another worker is either before it, and linked here, or after it, and links this chunk
# through PENDING), the pairs whose two ends exist. A symbol no chunk defines any more goes,
# with its edges (a chunk that used it keeps the name in code_targets, to link it again).
REPLACE_CODE = """
UNWIND $chunks AS r
MATCH (c:Chunk {id: r.id})<-[h:HAS_CHUNK]-()
WITH c, h, r, coalesce(h.pairs, []) AS old
SET h.pairs = r.pairs, h.code_targets = r.targets, h.entities_at = $now, h.graph_task = $task
WITH collect(c.id) AS ids, collect({id: c.id, old: old}) AS undone
""" + cypher_graph.UNDO_CONTRIBUTION + """CALL {
  WITH ids UNWIND $entities AS en
  WITH en WHERE en.chunk IN ids
  MERGE (e:Entity {id: en.id})
  SET e.key = en.key, e.name = en.name, e.type = en.type, e.source = en.source,
      e.start_line = en.start_line, e.end_line = en.end_line, e.words = en.words,
      e.summary = en.summary
}
CALL {
  WITH ids UNWIND $mentions AS mn
  WITH mn WHERE mn.chunk IN ids
  MATCH (c:Chunk {id: mn.chunk}) MATCH (e:Entity {id: mn.entity})
  CREATE (c)-[:MENTIONS {count: mn.count, type: coalesce(mn.type, e.type), role: mn.role,
                         lines: mn.lines}]->(e)
}
CALL {
  WITH ids UNWIND $related AS rel
  WITH rel, [id IN rel.chunks WHERE id IN ids] AS fresh WHERE size(fresh) > 0
  MATCH (a:Entity {id: rel.a}) MATCH (b:Entity {id: rel.b})
  MERGE (a)-[x:RELATED]->(b)
  WITH x, fresh, rel, x.weight IS NULL AS created
  SET x.weight = coalesce(x.weight, 0) + size(fresh),
      x.evidence = (coalesce(x.evidence, []) + fresh)[-$keep..],
      x.kind = coalesce(x.kind, rel.kind)
  RETURN sum(CASE WHEN created THEN 1 ELSE 0 END) AS relations
}
""" + cypher_graph.DROP_SPENT_EDGES + """CALL {
  WITH touched UNWIND touched AS eid
  MATCH (e:Entity {id: eid})
  WHERE NOT (e)<-[:MENTIONS]-(:Chunk)
     OR (e.source IS NOT NULL AND NOT (e)<-[:MENTIONS {role: 'defines'}]-(:Chunk))
  DETACH DELETE e
}
RETURN size(ids), relations
"""
# after a delete forgot chunks (workers/store.forget_entities): a symbol no chunk defines
# any more goes, though chunks that used it still mention it
DROP_UNDEFINED = """
UNWIND $ids AS eid
MATCH (e:Entity {id: eid})
WHERE e.source IS NOT NULL AND NOT (e)<-[:MENTIONS {role: 'defines'}]-(:Chunk)
DETACH DELETE e
"""

# ---- reads (services/query/symbols.py) ----
# symbols whose name's or summary's words match $q (RediSearch syntax on those fields
# alone, which prose entities lack): id, key, name, type, mentions, score, summary
SYMBOL_WORDS = """
CALL db.idx.fulltext.queryNodes('Entity', $q) YIELD node AS e, score
WITH e, score WHERE e.source IS NOT NULL AND ($type IS NULL OR e.type = $type)
WITH e, score ORDER BY score DESC, e.id LIMIT $limit
MATCH (e)<-[m:MENTIONS]-(:Chunk)
RETURN e.id, e.key, e.name, e.type, count(m), score, e.summary
"""
SYMBOL_PLACES = """
UNWIND $ids AS id MATCH (e:Entity {id: id}) WHERE e.source IS NOT NULL
RETURN e.id, e.source, e.start_line, e.end_line
"""
# the passages that refer to a symbol ("WITH" between the steps: walk out from the entity)
SYMBOL_USES = """
MATCH (e:Entity {id: $id}) WITH e
MATCH (e)<-[r:MENTIONS {role: 'uses'}]-(c:Chunk) WITH r, c
MATCH (m:Memory)-[:HAS_CHUNK]->(c) WHERE """ + VISIBLE + """
RETURN m.id, c.id, m.source, c.start_line, c.end_line, r.lines, r.count
ORDER BY r.count DESC, c.id LIMIT $limit
"""
SYMBOL_RELATIONS_OUT = """
MATCH (e:Entity {id: $id})-[x:RELATED]->(n:Entity) WHERE x.kind IS NOT NULL
RETURN x.kind, n.id, n.name, n.type ORDER BY x.kind, n.name LIMIT $limit
"""
SYMBOL_RELATIONS_IN = """
MATCH (e:Entity {id: $id})<-[x:RELATED]-(n:Entity) WHERE x.kind IS NOT NULL
RETURN x.kind, n.id, n.name, n.type ORDER BY x.kind, n.name LIMIT $limit
"""
