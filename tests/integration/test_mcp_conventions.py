"""The MCP conventions clients rely on, through fastmcp's real client against the real front,
query service, Redis/FalkorDB and workers: every tool's hints and output schema (and its real
answers valid against that schema), the memory:// resources, the prompts, and progress
notifications from a batch."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from fastmcp import Client
from jsonschema import Draft202012Validator
from mcp.shared.exceptions import MCPError

from tests.conftest import make_settings
from tests.support.mcp import call
from tests.support.workers import run_workers
from zapomni.services.mcp.server import build_server

HINTS = ("read_only_hint", "destructive_hint", "idempotent_hint", "open_world_hint")
READS = {"graph_status", "search_memory", "get_memory", "get_stats", "search_entities",
         "get_entity", "list_memories", "get_history", "build_context"}
DESTROYS = {"delete_memory", "update_memory", "cancel_task", "ingest_path"}
OPEN_WORLD = {"ingest_path"}  # it reads the host's files; every other tool only our stores
TEXTS = ["Helena Varga designed the new bridge over the Danube in Vienna.",
         "Zorblax Industries hired Helena Varga as its chief engineer."]


@pytest.fixture
def settings(settings, tmp_path):
    """ingest_path reads under tmp_path (a changed file replaces its memory: destructive)."""
    return msgspec.structs.replace(settings, ingest_roots=str(tmp_path))


def lacking(tool) -> list[str]:
    """What a listed tool lacks of the conventions (services/mcp/conventions.py)."""
    hints = tool.annotations.model_dump() if tool.annotations else {}
    problems = [f"{tool.name}: no {h}" for h in HINTS if hints.get(h) is None]
    if hints.get("open_world_hint") is (tool.name not in OPEN_WORLD):
        problems.append(f"{tool.name}: open_world_hint must be {tool.name in OPEN_WORLD}")
    schema = tool.output_schema or {}
    # fastmcp derives {"type": "object"} alone from a `-> dict` annotation: that says nothing
    if schema.get("type") != "object" or not ({"properties", "anyOf"} & set(schema)):
        problems.append(f"{tool.name}: no output schema describing its answer")
    return problems


async def test_every_tool_declares_its_hints_and_an_output_schema(client):
    """Fails for a tool registered without ``tool_spec`` (services/mcp/conventions.py)."""
    tools = await client.list_tools()
    problems = [p for tool in tools for p in lacking(tool)]
    assert not problems, "register these tools with tool_spec(...): " + "; ".join(problems)
    for tool in tools:
        Draft202012Validator.check_schema(tool.output_schema)
    hints = {t.name: t.annotations for t in tools}
    assert set(hints) >= READS | DESTROYS
    for name, given in hints.items():
        assert given.read_only_hint is (name in READS), name
        assert given.destructive_hint is (name in DESTROYS), name
    assert hints["add_memory"].idempotent_hint and hints["delete_memory"].idempotent_hint


async def test_a_tool_registered_without_the_conventions_is_caught(settings):
    server = build_server(settings)

    @server.tool
    async def bare(text: str) -> dict[str, Any]:
        return {"text": text}

    async with Client(server) as client:
        tool = next(t for t in await client.list_tools() if t.name == "bare")
    assert lacking(tool) == [
        "bare: no read_only_hint", "bare: no destructive_hint", "bare: no idempotent_hint",
        "bare: no open_world_hint", "bare: no output schema describing its answer"]


class Answers:
    """Each tool's answers, checked against the output schema the tool advertised."""

    def __init__(self, client: Client, schemas: dict[str, dict]) -> None:
        self.client, self.schemas, self.called = client, schemas, set()

    async def __call__(self, tool: str, **arguments) -> dict:
        answer = await call(self.client, tool, **arguments)
        errors = list(Draft202012Validator(self.schemas[tool]).iter_errors(answer))
        assert not errors, f"{tool}: {errors[0].message} in {json.dumps(answer)[:300]}"
        self.called.add(tool)
        return answer


async def test_every_answer_is_valid_against_its_schema(client, settings, tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "bridge.md").write_text("# Bridge\nThe bridge opened in May.\n")
    tools = await client.list_tools()
    answer = Answers(client, {t.name: t.output_schema for t in tools})
    first = await answer("add_memory", text=TEXTS[0], namespace="kg",
                         metadata={"tags": ["bridges"], "thread": "chat-1"})
    await answer("add_memories", namespace="kg",
                 items=[{"text": TEXTS[1], "metadata": {"thread": "chat-1"}}])
    again = await answer("add_memory", text=TEXTS[0], namespace="kg",
                         metadata={"tags": ["other"]})
    assert again["duplicate"] and again["metadata_changed"]
    await answer("graph_status", task_id=first["task_id"])  # queued
    queued = await answer("get_memory", memory_id=first["memory_id"], namespace="kg")
    assert (queued["status"], queued["task_id"]) == ("queued", first["task_id"])
    files = await answer("ingest_path", path=str(tmp_path / "notes"), namespace="kg")
    await run_workers(settings)
    walked = await answer("graph_status", task_id=files["task_id"])
    assert (walked["kind"], walked["state"], walked["files"]["added"]) == ("files", "done", 1)
    ingest = await answer("graph_status", task_id=first["task_id"])
    graph = await answer("graph_status", task_id=ingest["graph_task_id"])
    assert graph["kind"] == "graph" and "entities_created" in graph
    await answer("cancel_task", task_id=first["task_id"])  # done: answered unchanged
    await answer("build_graph", namespace="kg", rebuild=True)
    await answer("search_memory", query="who designed the bridge?", namespace="kg",
                 rank="memory")
    await answer("get_memory", memory_id=first["memory_id"], namespace="kg")
    await answer("get_stats", namespace="kg")
    await answer("list_memories", namespace="kg")
    found = await answer("search_entities", query="varga", namespace="kg")
    await answer("get_entity", name_or_id=found["results"][0]["name"], namespace="kg")
    await answer("get_history", thread="chat-1", namespace="kg")
    await answer("build_context", query="bridge", thread="chat-1", namespace="kg")
    unchanged = await answer("update_memory", memory_id=first["memory_id"], namespace="kg",
                             metadata={"tags": ["bridges"]})
    assert unchanged["status"] == "unchanged"
    await answer("update_memory", memory_id=first["memory_id"], namespace="kg",
                 metadata={"importance": 0.9})
    await answer("delete_memory", memory_id=first["memory_id"], namespace="kg")
    moving = await answer("reembed", namespace="kg")
    assert (await answer("graph_status", task_id=moving["task_id"]))["kind"] == "reembed"
    missed = {t.name for t in tools} - answer.called
    assert not missed, f"not called here, so their answers are unchecked: {sorted(missed)}"


async def test_a_refused_add_is_valid_against_its_schema(settings, falkordb_url):
    policed = make_settings(falkordb_url, write_policy=json.dumps({"*": {"min_confidence": 0.5}}))
    async with Client(build_server(policed)) as client:
        tools = {t.name: t.output_schema for t in await client.list_tools()}
        answer = Answers(client, tools)
        refused = await answer("add_memory", text="Maybe.", metadata={"confidence": 0.1})
        batch = await answer("add_memories", items=[{"text": "Maybe not.",
                                                     "metadata": {"confidence": 0.1}}])
    assert refused["stored"] is False and batch["results"][0]["stored"] is False


async def read(client: Client, uri: str) -> dict:
    contents = await client.read_resource(uri)
    assert contents[0].mime_type == "application/json"
    return json.loads(contents[0].text)


async def test_resources_read_a_namespace_and_its_memories(client, settings):
    listed = {str(r.uri) for r in await client.list_resources()}
    assert listed == {"memory://default/stats", "memory://default/recent"}
    templates = {t.uri_template for t in await client.list_resource_templates()}
    assert templates == {"memory://{namespace}/stats", "memory://{namespace}/recent",
                         "memory://{namespace}/{memory_id}"}
    added = [await call(client, "add_memory", text=text, namespace="notes") for text in TEXTS]
    await call(client, "add_memory", text="A memory in the default namespace.")
    await run_workers(settings)

    stats = await read(client, "memory://notes/stats")
    assert stats == await call(client, "get_stats", namespace="notes")
    assert stats["memories"] == 2
    recent = await read(client, "memory://notes/recent")
    assert [m["memory_id"] for m in recent["memories"]] == [a["memory_id"]
                                                            for a in reversed(added)]
    memory = await read(client, f"memory://notes/{added[0]['memory_id']}")
    assert (memory["text"], memory["status"]) == (TEXTS[0], "ready")
    assert (await read(client, "memory://default/stats"))["memories"] == 1
    assert len((await read(client, "memory://default/recent"))["memories"]) == 1


@pytest.mark.parametrize(("uri", "message"), [
    ("memory://Bad/stats", "namespace: must be 1-64 characters"),
    ("memory://notes/mem_1", "memory_id: not a valid id (expected mem_ and 32 hex digits)"),
    ("memory://notes/" + "mem_" + "0" * 32, "not found"),
])
async def test_a_bad_resource_uri_is_one_clear_line(client, uri, message):
    with pytest.raises(MCPError) as raised:
        await client.read_resource(uri)
    text = str(raised.value)
    assert message in text and "\n" not in text and "Traceback" not in text


async def test_prompts_lead_the_model_to_the_tools(client):
    prompts = {p.name: [(a.name, a.required) for a in p.arguments]
               for p in await client.list_prompts()}
    assert prompts == {"recall": [("topic", True), ("namespace", False)],
                       "save_conversation": [("namespace", False), ("thread", False)],
                       "summarise_namespace": [("namespace", False)]}
    recall = (await client.get_prompt("recall", {"topic": "the Danube bridge",
                                                 "namespace": "kg"})).messages[0].content.text
    assert '"the Danube bridge"' in recall and '"kg"' in recall
    assert "search_memory" in recall and "memory_id" in recall
    save = (await client.get_prompt("save_conversation", {"thread": "chat-1"})
            ).messages[0].content.text
    assert 'get_history(thread="chat-1"' in save and "add_memories" in save
    assert '"conversation": "chat-1"' in save
    assert "get_history" not in (await client.get_prompt("save_conversation")
                                 ).messages[0].content.text
    summary = (await client.get_prompt("summarise_namespace")).messages[0].content.text
    assert 'list_memories(namespace="default"' in summary


@pytest.mark.parametrize(("prompt", "arguments", "message"), [
    ("recall", {}, "topic: required but missing; send it as a string (what to recall: a "
                   "question, a name or a subject)"),
    ("recall", {"topic": "  "}, "topic: must not be empty; say what to recall"),
    ("recall", {"topic": "x" * 2001}, "topic: too long (at most 2,000 characters)"),
    ("recall", {"topic": "x", "namespace": "Bad NS"}, "namespace: must be 1-64 characters"),
    ("save_conversation", {"thread": "t" * 513}, "thread: expected a string of 1-512"),
])
async def test_a_bad_prompt_argument_is_one_clear_line(client, prompt, arguments, message):
    with pytest.raises(MCPError) as raised:
        await client.get_prompt(prompt, arguments)
    assert message in str(raised.value) and "\n" not in str(raised.value)


async def test_a_batch_reports_its_progress(client, aredis, settings):
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total, message))

    items = [{"text": f"Fact number {i} about the bridge."} for i in range(45)]
    result = await client.call_tool("add_memories", {"items": items, "namespace": "notes"},
                                    progress_handler=progress)
    assert len(result.structured_content["results"]) == 45
    assert seen[0] == (0, 45, "45 validated; none queued yet")
    assert seen[-1] == (45, 45, "45 of 45 queued")
    done = [d for d, _, _ in seen]
    assert done == sorted(done) and len(seen) <= 25  # bounded: about one per 5%
    assert await aredis.zcard("zapomni:tasks:notes:queued") == 45  # (in one batch's job)
