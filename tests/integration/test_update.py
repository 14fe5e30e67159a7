"""update_memory: metadata in place, a new text as a new version, the versions get_memory
lists, the answer to a text added again with other metadata, and updates racing deletes,
ingests and each other. Real Redis/FalkorDB, real workers, the query service over HTTP."""

from __future__ import annotations

import msgspec
import pytest
from fastmcp import Client

from tests.conftest import make_settings
from tests.integration.test_races import Act, delete_now
from tests.support.graph import query, stored
from tests.support.mcp import call, error
from tests.support.servers import ThreadedServer
from tests.support.workers import add_text, run_workers, wait_tasks
from zapomni.services.mcp import front as ops
from zapomni.services.mcp import update
from zapomni.services.mcp.server import build_server
from zapomni.services.query.app import build_app
from zapomni.shared.protocol.answers import MemoryRecord, SearchResponse
from zapomni.shared.protocol.api import MemoryRef
from zapomni.shared.protocol.errors import InvalidInput, NotFound, Unavailable
from zapomni.shared.protocol.validation import decode_search, decode_update
from zapomni.shared.tasks import tasks
from zapomni.shared.tasks.capacity import QUEUE_NAME

OLD = "Mira's favourite tea is jasmine."
NEW = "Mira's favourite tea is now rooibos."
QUESTION = "What is Mira's favourite tea?"


async def change(front, memory_id, text=None, metadata=None, namespace=None):
    return await update.update_memory(front, decode_update(memory_id, text, metadata,
                                                           namespace))


async def search(front, text, filters=None, namespace=None) -> list:
    request = decode_search(text, 10, filters, namespace)
    return (await front.query.call("/v1/search", request, SearchResponse)).results


async def get(front, memory_id, namespace="default") -> MemoryRecord:
    return await front.query.call("/v1/memory", MemoryRef(memory_id=memory_id,
                                                           namespace=namespace), MemoryRecord)


async def nothing_pending(aredis, settings) -> bool:
    """No job queued and no update task recorded."""
    records = [await tasks.get_task(aredis, key.decode().split(":")[-1])
               for key in await aredis.keys("zapomni:task:*")]
    return (await aredis.zcard(QUEUE_NAME) == 0
            and not [r for r in records if r.kind == "update"])


async def test_metadata_changes_in_place(settings, front, query_service, aredis):
    added = await add_text(settings, OLD, {"tags": ["drinks"], "source": "chat",
                                           "room": "kitchen", "importance": 0.2})
    await run_workers(settings)
    receipt = await change(front, added.memory_id, metadata={
        "tags": ["drinks", "mira"], "room": None, "importance": 0.9,
        "memory_type": "preference"})
    assert (receipt.memory_id, receipt.status) == (added.memory_id, "queued")
    assert msgspec.to_builtins(receipt).keys() == {"memory_id", "task_id", "status",
                                                   "namespace"}
    record = await ops.task_status(front, receipt.task_id)
    assert (record.kind, record.state, record.memory_id) == ("update", "queued",
                                                             added.memory_id)
    await run_workers(settings)

    record = await ops.task_status(front, receipt.task_id)
    assert (record.state, record.message) == ("done", "metadata updated")
    memory = await get(front, added.memory_id)
    assert (memory.tags, memory.source, memory.metadata) == (
        ["drinks", "mira"], "chat", {"importance": 0.9, "memory_type": "preference"})
    assert [h.memory_id for h in await search(front, QUESTION, {"tags": ["mira"]})] == [
        added.memory_id]
    assert await search(front, QUESTION, {"metadata": {"room": "kitchen"}}) == []
    rows = await query(settings, "MATCH (m:Memory) RETURN m.importance, m.memory_type")
    assert rows == [[0.9, "preference"]]
    # the memory is its ingest's again, which now knows the metadata it has
    assert await tasks.owner_task(aredis, "default", added.memory_id) == added.task_id
    same = await add_text(settings, OLD, {"tags": ["mira", "drinks"], "source": "chat",
                                          "importance": 0.9, "memory_type": "preference"})
    assert (same.duplicate, same.task_id, same.metadata_changed) == (True, added.task_id,
                                                                     msgspec.UNSET)


async def test_a_new_text_replaces_the_old_once_it_is_searchable(settings, front,
                                                                  query_service, aredis):
    old = await add_text(settings, OLD, {"tags": ["drinks"], "thread": "chat-1"})
    await run_workers(settings)
    receipt = await change(front, old.memory_id, text=NEW, metadata={"importance": 0.7})
    assert receipt.supersedes == old.memory_id and receipt.memory_id != old.memory_id
    seen = []

    async def look(job) -> None:  # the new version is written, not yet searchable
        seen.append([h.memory_id for h in await search(front, QUESTION)])

    await run_workers(settings, checkpoint=Act("finishing", look))
    assert seen == [[old.memory_id]]
    assert [h.memory_id for h in await search(front, QUESTION)] == [receipt.memory_id]
    both = await search(front, QUESTION, {"include_superseded": True})
    assert {h.memory_id for h in both} == {old.memory_id, receipt.memory_id}

    new = await get(front, receipt.memory_id)
    said = (await get(front, old.memory_id)).occurred_at  # the old one's event time
    assert (new.text, new.tags, new.metadata) == (NEW, ["drinks"], {
        "thread": "chat-1", "importance": 0.7, "occurred_at": said.replace("+00:00", "Z")})
    assert new.occurred_at == said  # a correction keeps when it happened (issue 51)
    versions = [(v.memory_id, v.current) for v in new.versions]
    assert versions == [(old.memory_id, False), (receipt.memory_id, True)]
    assert new.superseded_by is msgspec.UNSET
    before = await get(front, old.memory_id)
    assert (before.text, before.superseded_by, before.status) == (OLD, receipt.memory_id,
                                                                  "ready")
    assert [(v.memory_id, v.current) for v in before.versions] == versions
    # a new turn at the end of the thread
    rows = await query(settings, "MATCH (a:Memory)-[:THEN]->(b:Memory) RETURN a.id, b.id")
    assert rows == [[old.memory_id, receipt.memory_id]]
    with pytest.raises(InvalidInput, match=f"older version, replaced by {receipt.memory_id}"):
        await change(front, old.memory_id, metadata={"importance": 0.1})


async def test_deleting_a_version_closes_the_chain(settings, front, query_service, aredis):
    """A -> B -> C: deleting B leaves A -> C; deleting C then makes A current again."""
    a = await add_text(settings, OLD)
    await run_workers(settings)
    b = await change(front, a.memory_id, text="Mira's favourite tea is now rooibos.")
    await run_workers(settings)
    c = await change(front, b.memory_id, text="Mira's favourite tea is now sencha.")
    await run_workers(settings)
    assert [v.memory_id for v in (await get(front, a.memory_id)).versions] == [
        a.memory_id, b.memory_id, c.memory_id]
    deleted = await ops.delete_memory(front, MemoryRef(memory_id=b.memory_id))
    await run_workers(settings)
    await wait_tasks(aredis, [deleted.task_id])
    first = await get(front, a.memory_id)
    assert first.superseded_by == c.memory_id
    assert [v.memory_id for v in first.versions] == [a.memory_id, c.memory_id]
    deleted = await ops.delete_memory(front, MemoryRef(memory_id=c.memory_id))
    await run_workers(settings)
    first = await get(front, a.memory_id)
    assert (first.superseded_by, first.versions) == (msgspec.UNSET, msgspec.UNSET)
    assert [h.memory_id for h in await search(front, QUESTION)] == [a.memory_id]


async def test_no_change_of_a_version_lands_while_its_new_version_is_made(
        settings, front, query_service, aredis):
    """Once a new text of A is accepted, a metadata change or another new text of A is
    refused with the task to wait for (it would land on A, which the new version then
    replaces with the metadata it read before: lost); once that task is done, A is an older
    version, refused as such, and the new version takes the change."""
    a = await add_text(settings, OLD, {"tags": ["drinks"]})
    await run_workers(settings)
    b = await change(front, a.memory_id, text=NEW)
    waiting = (f"memory {a.memory_id} is being replaced by a new version (memory "
               f"{b.memory_id}, task {b.task_id}); nothing was changed. Once "
               f"graph_status({b.task_id}) says done, update {b.memory_id} instead")
    for text, metadata in ((None, {"tags": ["late"]}), ("Mira's tea is now sencha.", None)):
        with pytest.raises(Unavailable) as refused:
            await change(front, a.memory_id, text=text, metadata=metadata)
        assert refused.value.message == waiting
    assert await nothing_pending(aredis, settings) is False  # b's ingest only
    await run_workers(settings)
    with pytest.raises(InvalidInput, match=f"older version, replaced by {b.memory_id}"):
        await change(front, a.memory_id, metadata={"tags": ["late"]})
    await change(front, b.memory_id, metadata={"tags": ["late"]})
    await run_workers(settings)
    assert [(h.memory_id, h.tags) for h in await search(front, QUESTION)] == [
        (b.memory_id, ["late"])]
    assert (await get(front, a.memory_id)).tags == ["drinks"]
    assert await tasks.owner_task(aredis, "default", a.memory_id) == a.task_id


async def test_an_update_accepted_while_a_new_version_reads_the_memory_is_refused(
        settings, front, query_service, aredis, monkeypatch):
    """The new version holds the memory from before it reads it until its ingest is
    queued: a metadata change that comes in between (acted at that seam) is refused, not
    left to land on the version being replaced."""
    a = await add_text(settings, OLD, {"tags": ["drinks"]})
    await run_workers(settings)
    between = []
    add_memory = ops.add_memory

    async def add_after_an_update(front_, memory):
        try:
            between.append(await change(front, a.memory_id, metadata={"tags": ["late"]}))
        except Unavailable as exc:
            between.append(exc.message)
        return await add_memory(front_, memory)

    monkeypatch.setattr(update.ops, "add_memory", add_after_an_update)
    b = await change(front, a.memory_id, text=NEW)
    monkeypatch.setattr(update.ops, "add_memory", add_memory)
    assert len(between) == 1 and isinstance(between[0], str), between
    assert between[0].startswith(f"memory {a.memory_id} is being updated by task ")
    await run_workers(settings)
    assert [(h.memory_id, h.tags) for h in await search(front, QUESTION)] == [
        (b.memory_id, ["drinks"])]
    assert (await get(front, a.memory_id)).tags == ["drinks"]
    assert await nothing_pending(aredis, settings)
    assert await tasks.owner_task(aredis, "default", a.memory_id) == a.task_id


async def test_unknown_memories_and_invalid_or_empty_updates_change_nothing(
        settings, front, query_service, aredis):
    added = await add_text(settings, OLD, {"pinned": True, "thread": "t"})
    await run_workers(settings)
    unknown = "mem_" + "0" * 32
    with pytest.raises(NotFound, match=f"memory_id: {unknown} not found in namespace"):
        await change(front, unknown, metadata={"tags": ["x"]})
    with pytest.raises(NotFound, match="not found"):
        await change(front, unknown, text=NEW)
    for memory_id, text, metadata, message in [
        (added.memory_id, None, None, "text: give a new text, or metadata"),
        (added.memory_id, None, {}, "metadata: empty; give the keys to change"),
        (added.memory_id, None, {"id": None}, "metadata: reserved key"),
        (added.memory_id, None, {"tags": "x"}, "metadata.tags: expected a list"),
        (added.memory_id, None, [1], "metadata: expected a JSON object, got a list"),
        (added.memory_id, "  ", None, "text: must not be empty"),
        ("mem_x", None, {"a": 1}, "memory_id: not a valid id"),
    ]:
        with pytest.raises(InvalidInput, match=message):
            await change(front, memory_id, text, metadata)
    for metadata, message in [
        ({"thread": "other"}, "metadata.thread: the thread of a memory cannot be changed"),
        ({"expires_in": 3600}, "metadata: pinned and expires_at together"),
        ({"importance": 2}, "metadata.importance: expected a number from 0 to 1"),
    ]:
        with pytest.raises(InvalidInput, match=message):
            await change(front, added.memory_id, metadata=metadata)
        with pytest.raises(InvalidInput, match=message):
            await change(front, added.memory_id, text=NEW, metadata=metadata)
    same = await change(front, added.memory_id, metadata={"pinned": True})
    assert (same.status, same.task_id) == ("unchanged", None)
    own_text = await change(front, added.memory_id, text=f"  {OLD}\n")
    assert (own_text.status, own_text.memory_id) == ("unchanged", added.memory_id)
    assert await nothing_pending(aredis, settings)
    assert await tasks.owner_task(aredis, "default", added.memory_id) == added.task_id
    assert (await stored(settings))["memories"] == 1


async def test_updates_wait_for_the_task_writing_the_memory(settings, front, query_service,
                                                            aredis):
    """While the memory's ingest or another update is under way, an update is refused with
    the task to wait for; an add of the same text meanwhile is a duplicate of the update."""
    added = await add_text(settings, OLD)  # its ingest waits in the queue
    with pytest.raises(Unavailable, match=f"being written by task {added.task_id}"):
        await change(front, added.memory_id, metadata={"tags": ["a"]})
    with pytest.raises(Unavailable, match=f"being written by task {added.task_id}"):
        await change(front, added.memory_id, text=NEW)
    await run_workers(settings)
    first = await change(front, added.memory_id, metadata={"tags": ["a"]})
    with pytest.raises(Unavailable, match=f"being updated by task {first.task_id}"):
        await change(front, added.memory_id, metadata={"tags": ["b"]})
    with pytest.raises(Unavailable, match=f"being updated by task {first.task_id}"):
        await change(front, added.memory_id, text=NEW)
    again = await add_text(settings, OLD)
    assert (again.duplicate, again.task_id) == (True, first.task_id)
    with pytest.raises(InvalidInput, match="an update cannot be cancelled"):
        await ops.cancel_task(front, first.task_id)
    await run_workers(settings)
    assert (await get(front, added.memory_id)).tags == ["a"]
    assert await tasks.owner_task(aredis, "default", added.memory_id) == added.task_id
    assert (await stored(settings))["memories"] == 1


@pytest.mark.parametrize("point", ["update_owned", "updated"])
async def test_a_delete_during_an_update_wins(settings, front, query_service, aredis, point):
    """The delete is accepted while the update's job runs (before or after its write): the
    memory is gone, the update is cancelled, nothing comes back."""
    added = await add_text(settings, OLD, {"tags": ["a"]})
    await run_workers(settings)
    receipt = await change(front, added.memory_id, metadata={"tags": ["b"]})
    act = Act(point, delete_now(settings, aredis))
    await run_workers(settings, checkpoint=act)
    assert act.fired == 1
    assert (await stored(settings))["memories"] == 0
    record = await tasks.get_task(aredis, receipt.task_id)
    assert (record.state, record.message) == ("cancelled", "the memory was deleted")
    assert await tasks.owner_task(aredis, "default", added.memory_id) is None
    assert not (await add_text(settings, OLD)).duplicate  # the text can be added again


async def test_a_delete_before_the_update_runs_cancels_it(settings, front, query_service,
                                                          aredis):
    added = await add_text(settings, OLD)
    await run_workers(settings)
    receipt = await change(front, added.memory_id, metadata={"tags": ["b"]})
    await ops.delete_memory(front, MemoryRef(memory_id=added.memory_id))
    await run_workers(settings)
    assert (await tasks.get_task(aredis, receipt.task_id)).state == "cancelled"
    assert (await stored(settings))["memories"] == 0


async def test_the_same_text_with_other_metadata_says_the_metadata_was_kept(
        settings, front, query_service, aredis):
    first = await add_text(settings, OLD, {"tags": ["a", "b"], "source": "chat", "k": 1})
    same = await add_text(settings, OLD, {"source": "chat", "k": 1, "tags": ["b", "a"]})
    assert msgspec.to_builtins(same) == {"memory_id": first.memory_id,
                                         "task_id": first.task_id, "status": "queued",
                                         "duplicate": True, "namespace": "default"}
    other = await add_text(settings, OLD, {"tags": ["a"]})
    assert (other.duplicate, other.metadata_changed) == (True, True)
    assert "the stored metadata was kept" in other.message
    assert "update_memory(memory_id, metadata=...)" in other.message
    await run_workers(settings)
    assert (await get(front, first.memory_id)).tags == ["a", "b"]
    await aredis.delete(tasks.task_key(first.task_id))  # as when the record expires
    assert (await add_text(settings, OLD, {"tags": ["a"]})).metadata_changed is True
    plain = await add_text(settings, OLD, {"tags": ["a", "b"], "source": "chat", "k": 1})
    assert plain.metadata_changed is msgspec.UNSET


async def test_a_new_text_already_stored_is_a_duplicate(settings, front, query_service):
    a = await add_text(settings, OLD)
    b = await add_text(settings, NEW)
    await run_workers(settings)
    receipt = await change(front, a.memory_id, text=NEW)
    assert (receipt.duplicate, receipt.memory_id, receipt.supersedes) == (
        True, b.memory_id, msgspec.UNSET)
    assert "no new version was made" in receipt.message
    await run_workers(settings)
    assert {h.memory_id for h in await search(front, QUESTION)} == {a.memory_id, b.memory_id}


async def test_a_new_version_deleted_as_it_finishes_leaves_the_old_one_current(
        settings, front, query_service, aredis):
    """The delete is accepted while the new version finishes and runs after it: the new
    version marks itself searchable and replaces the old one, then finds it lost its memory
    and undoes itself, which makes the old one current again."""
    old = await add_text(settings, OLD)
    await run_workers(settings)
    receipt = await change(front, old.memory_id, text=NEW)
    act = Act("finishing", delete_now(settings, aredis, wait=False))
    await run_workers(settings, checkpoint=act)
    assert act.fired == 1
    assert (await tasks.get_task(aredis, receipt.task_id)).state == "cancelled"
    assert [h.memory_id for h in await search(front, QUESTION)] == [old.memory_id]
    memory = await get(front, old.memory_id)
    assert (memory.superseded_by, memory.versions) == (msgspec.UNSET, msgspec.UNSET)
    assert (await stored(settings))["memories"] == 1


async def test_the_tool_answers_and_refuses_a_full_queue_leaving_nothing(falkordb_url, aredis):
    """Through fastmcp's client: the answer's fields, and a queue that is full refuses the
    update (retryable) with the memory left to its ingest."""
    settings = make_settings(falkordb_url, max_queue_depth=1)
    port = int(settings.query_url.rsplit(":", 1)[1])
    with ThreadedServer(build_app(settings), port=port):
        async with Client(build_server(settings)) as client:
            added = await call(client, "add_memory", text=OLD, metadata={"tags": ["a"]})
            await run_workers(settings)
            other = await call(client, "add_memory", text=QUESTION)
            await run_workers(settings)
            answer = await call(client, "update_memory", memory_id=added["memory_id"],
                                text=NEW)
            assert set(answer) == {"memory_id", "task_id", "status", "namespace",
                                   "supersedes"}
            assert (answer["status"], answer["supersedes"]) == ("queued",
                                                                added["memory_id"])
            full = await error(client, "update_memory", memory_id=other["memory_id"],
                               metadata={"tags": ["b"]})
            assert full.startswith("temporarily unavailable: the ingest queue is full")
            assert await tasks.owner_task(aredis, "default", other["memory_id"]) == \
                other["task_id"]
            await run_workers(settings)
            memory = await call(client, "get_memory", memory_id=answer["memory_id"])
            assert [v["current"] for v in memory["versions"]] == [False, True]
            assert memory["tags"] == ["a"]
    assert len(await aredis.keys("zapomni:task:*")) == 6  # 3 ingests, their 3 graph tasks
