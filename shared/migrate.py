"""The stored shape's version, and the steps that bring a namespace written by an older
version up to it. Reads never branch on the shape: a namespace is migrated before they see it.

Each namespace's graph records its version (ZapomniMeta ``schema``; none: 1). Workers run
``migrate_store`` at start-up (every namespace; a namespace already current costs one read)
and ``migrate_namespace`` before their first write to a namespace; ``zapomni migrate`` runs
it by hand. Every step is idempotent and batched, so workers starting together, or a step
cut short, only repeat work. A new graph is created at the current version.

Versions:
  1  before event time
  2  Memory.occurred_at (event time, indexed): a memory without one happened when it was
     added (``occurred_at = created_at``); a namespace with replaced memories is marked
     (ZapomniMeta ``versions``: search reads older versions for the current one)
"""

from __future__ import annotations

import logging

from zapomni.shared.graphstore import GRAPH_PREFIX, GraphStore, list_graphs, run
from zapomni.shared.store import cypher_schema

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
BATCH = 5000  # memories a step changes per statement
# the steps that reach each version, each run until it changes fewer than BATCH
STEPS: dict[int, tuple[str, ...]] = {2: (cypher_schema.MIGRATE_EVENT_TIME,
                                         cypher_schema.MIGRATE_VERSIONS_MARK)}


async def schema_version(store: GraphStore, namespace: str) -> int:
    rows = await run(store.graph(namespace), cypher_schema.READ_SCHEMA, read_only=True)
    return int(rows[0][0]) if rows and rows[0][0] is not None else 1


async def migrate_namespace(store: GraphStore, namespace: str) -> int:
    """Bring one namespace to SCHEMA_VERSION; the memories changed."""
    version = await schema_version(store, namespace)
    if version >= SCHEMA_VERSION:
        return 0
    graph = store.graph(namespace)
    changed = 0
    for step in range(version + 1, SCHEMA_VERSION + 1):
        for query in STEPS[step]:
            while True:
                rows = await run(graph, query, {"batch": BATCH})
                done = int(rows[0][0]) if rows else 0
                changed += done
                if done < BATCH:
                    break
        await run(graph, cypher_schema.WRITE_SCHEMA, {"version": step})
    log.info("namespace %s migrated from schema version %d to %d (%d memories changed)",
             namespace, version, SCHEMA_VERSION, changed)
    return changed


async def migrate_store(store: GraphStore) -> dict[str, int]:
    """Every namespace of the store: {namespace: memories changed} for those migrated."""
    migrated = {}
    for name in sorted(await list_graphs(store)):
        if name.startswith(GRAPH_PREFIX):
            namespace = name[len(GRAPH_PREFIX):]
            changed = await migrate_namespace(store, namespace)
            if changed:
                migrated[namespace] = changed
    return migrated
