"""The keyword postings (shared/store/postings.py) count a chunk only while the graph holds it:
a delete that lands while an ingest's text is being embedded leaves nothing counted once the
ingest finds its memory gone (it writes no chunk: its numbers are forgotten), whichever path
wrote it (a batch of small memories, a document's parts)."""

from __future__ import annotations

import msgspec
import pytest
import redis.asyncio

from tests.support.graph import stored
from tests.support.workers import add_text, run_workers, wait_tasks
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.shared.protocol.api import MemoryRef
from zapomni.shared.store import postings
from zapomni.shared.store.graphstore import GraphStore
from zapomni.shared.tasks import tasks

SHORT = "The ferry to the north island leaves at seven; the harbour master logs its cargo."
LONG = "\n\n".join(f"Paragraph {i}: the kestrel survey of the estuary, transect {i}, counted "
                   f"{i + 3} birds over the salt marsh at low tide in year {1990 + i}."
                   for i in range(12))


async def postings_state(settings) -> dict[str, object]:
    """What the postings count: document frequencies, chunks numbered, words."""
    store = GraphStore(settings)
    try:
        graph = store.graph("default")
        keys = postings.prefix(graph.key)
        return {"df": await graph.raw.hgetall(keys + "df"),
                "numbered": await graph.raw.hlen(keys + "seqof"),
                "words": int(await graph.raw.get(keys + "words") or 0)}
    finally:
        await store.aclose()


@pytest.mark.parametrize("text", [SHORT, LONG], ids=["batch", "parts"])
async def test_a_delete_while_the_text_is_embedded_leaves_nothing_counted(
        settings, fake_ollama, aredis, part_chunks, text):
    part_chunks(4)  # the long text fans out: its first part is written by the ingest itself
    settings = msgspec.structs.replace(settings, ollama_url=fake_ollama.url)
    receipt = await add_text(settings, text)
    deleted: list[str] = []

    async def delete_while_embedding(texts: list[str]) -> None:
        """In the fake server's loop, while the worker waits for these vectors: delete the
        memory through the front and wait until the worker has run the delete."""
        if deleted:
            return
        front = Front(settings)
        client = redis.asyncio.Redis.from_url(settings.redis_url)
        try:
            delete = await ops.delete_memory(front, MemoryRef(memory_id=receipt.memory_id))
            deleted.append(delete.task_id)
            await wait_tasks(client, [delete.task_id], timeout=60)
        finally:
            await client.aclose()
            await front.aclose()

    fake_ollama.before_answer = delete_while_embedding
    await run_workers(settings)
    assert deleted, "the worker never asked for the text's vectors"
    assert (await tasks.get_task(aredis, receipt.task_id)).state == "cancelled"
    assert (await stored(settings))["memories"] == (await stored(settings))["chunks"] == 0
    assert await postings_state(settings) == {"df": {}, "numbered": 0, "words": 0}
