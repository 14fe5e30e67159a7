"""Scoped tokens (ZAPOMNI_MCP_TOKENS) over HTTP: three tokens, five namespaces, every tool,
resource and prompt called by each token on each namespace (tests/support/isolation.py).
Nothing outside a token's scope answers, writes or tells whether it exists; inside it, every
read answers what the shared token's does."""

from __future__ import annotations

import msgspec
import pytest

from tests.support.isolation import ADMIN, Matrix, run_matrix, seed, tokens_setting
from tests.support.servers import ThreadedServer
from zapomni.services.mcp.http import http_app
from zapomni.shared.tasks.capacity import QUEUE_NAME


@pytest.mark.timeout(600)  # ~450 calls over HTTP and a worker's ingest of six memories
async def test_scoped_tokens_reach_only_their_namespaces(settings, query_service, tmp_path):
    root = tmp_path / "files"
    root.mkdir()
    (root / "harbour.md").write_text("# Harbour\nThe harbour crane lifts forty containers.")
    settings = msgspec.structs.replace(settings, mcp_token=ADMIN, mcp_tokens=tokens_setting(),
                                       ingest_roots=str(tmp_path))
    with ThreadedServer(http_app(settings)) as server:
        async with Matrix(f"{server.url}/mcp", settings.redis_url,
                          QUEUE_NAME) as matrix:
            seeds = await seed(matrix, settings)
            verdict = await run_matrix(matrix, seeds, str(root))
            listed = {name: sorted(str(r.uri) for r in await client.list_resources())
                      for name, client in [("admin", matrix.admin), *matrix.clients.items()]}
    summary = verdict.summary()
    print("isolation:", summary)
    assert summary["calls"] >= 3 * 5 * 23 and summary["out_of_scope_calls"] >= 150, summary
    assert verdict.out_of_scope_succeeded == []
    assert verdict.refused_but_wrote == []
    assert verdict.revealing == []
    assert verdict.in_scope_refused == []
    assert verdict.in_scope_writes_failed == []
    assert verdict.in_scope_differs == []
    # the default namespace's listed resources, only to a token that covers it
    default = ["memory://default/recent", "memory://default/stats"]
    assert listed == {"admin": default, "team-a": [], "reader": [], "shared": []}
