"""Source code through the real MCP server, query service, FalkorDB and arq workers: code
memories are chunked on their syntax, their hits say which lines they are (of the file as
sent, blank lines before its first line included, through moves and updates), and
source_prefix keeps the results under a folder."""

from __future__ import annotations

import io
from pathlib import Path

import msgspec
import pytest
import redis
from fastmcp import Client

from tests.conftest import make_settings
from tests.support.mcp import call, error
from tests.support.workers import add_text, run_import, run_workers
from zapomni.services.cli.export import export_namespace
from zapomni.services.mcp.server import build_server
from zapomni.shared.store.graphstore import GraphStore, run

CODE = Path(__file__).parents[1] / "data" / "code"
PYTHON = (CODE / "inventory.py").read_text()
GO = (CODE / "inventory.go").read_text()
NOTE = "Application notes: the inventory value is reported every Monday to the owner."


@pytest.fixture
def settings(falkordb_url):
    """Small chunks (as the unit tests of the chunker use), so a file is several passages."""
    client = redis.Redis.from_url(falkordb_url)
    client.flushall()
    client.close()
    return make_settings(falkordb_url, chunk_tokens=96)


@pytest.fixture
async def files(settings) -> dict[str, str]:
    """Two source files and a note whose source shares a prefix with one's folder, stored."""
    added = {
        "src/app/inventory.py": await add_text(settings, PYTHON, {
            "source": "src/app/inventory.py", "type": "code", "language": "python"}),
        "src/lib/inventory.go": await add_text(settings, GO, {
            "source": "src/lib/inventory.go", "type": "code", "language": "go"}),
        "src/application.md": await add_text(settings, NOTE, {"source": "src/application.md"}),
    }
    await run_workers(settings)
    return {source: receipt.memory_id for source, receipt in added.items()}


def line_of(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n") + 1


async def test_code_hits_carry_the_lines_they_span(client, files):
    found = await call(client, "search_memory", query="where is the cheapest item found",
                       mode="keyword", limit=5)
    hits = found["results"]
    assert hits and all(h["start_line"] >= 1 for h in hits)
    texts = {files["src/app/inventory.py"]: PYTHON, files["src/lib/inventory.go"]: GO,
             files["src/application.md"]: NOTE}
    for hit in hits:
        text = texts[hit["memory_id"]]
        assert text[hit["char_start"]:hit["char_end"]] == hit["text"]
        assert text[:hit["char_start"]].count("\n") + 1 == hit["start_line"]
        assert hit["end_line"] - hit["start_line"] == hit["text"].count("\n")
    best = hits[0]
    assert best["source"] == "src/app/inventory.py"
    assert best["start_line"] <= line_of(PYTHON, "def cheapest") <= best["end_line"]
    assert "return min(items" in best["text"]  # the whole function, not half of it


async def test_source_prefix_keeps_what_is_under_a_folder(client, files):
    for mode in ("hybrid", "vector", "keyword"):
        found = await call(client, "search_memory", query="inventory value of the items",
                           mode=mode, filters={"source_prefix": "src/app/"})
        assert {h["source"] for h in found["results"]} == {"src/app/inventory.py"}, mode
    wider = await call(client, "search_memory", query="inventory value of the items",
                       filters={"source_prefix": "src/app"})
    assert {h["source"] for h in wider["results"]} == {"src/app/inventory.py",
                                                       "src/application.md"}
    listed = await call(client, "list_memories", filters={"source_prefix": "src/"})
    assert sorted(m["source"] for m in listed["memories"]) == sorted(files)
    listed = await call(client, "list_memories", filters={"source_prefix": "src/lib/"})
    assert [m["memory_id"] for m in listed["memories"]] == [files["src/lib/inventory.go"]]
    context = await call(client, "build_context", query="inventory value of the items",
                         filters={"source_prefix": "src/lib/"})
    assert {m["memory_id"] for m in context["memories"]} == {files["src/lib/inventory.go"]}


async def test_a_bad_source_prefix_is_refused_in_one_line(client):
    assert await error(client, "search_memory", query="x", filters={"source_prefix": ""}) \
        == "filters.source_prefix: must not be empty"
    assert await error(client, "list_memories", filters={"source_prefix": "s" * 513}) == \
        "filters.source_prefix: too long (at most 512 characters)"
    assert await error(client, "build_context", query="x", filters={"source_prefix": 7}) == \
        "filters.source_prefix: expected a string or null, got an integer"


async def test_chunks_stored_before_lines_were_recorded_answer_with_null(client, files,
                                                                         settings):
    store = GraphStore(settings)
    try:
        await run(store.graph("default"),
                  "MATCH (c:Chunk) REMOVE c.start_line, c.end_line RETURN count(c)")
    finally:
        await store.aclose()
    found = await call(client, "search_memory", query="cheapest item", mode="keyword")
    assert found["results"]
    assert all(h["start_line"] is None and h["end_line"] is None for h in found["results"])


def check_lines(hits: list[dict], files: dict[str, str]) -> int:
    """Each hit's start_line..end_line are the lines of its file (by source) that hold its
    text; the number of hits checked."""
    checked = 0
    for hit in hits:
        lines = files[hit["source"]].split("\n")
        held = "\n".join(lines[hit["start_line"] - 1 : hit["end_line"]])
        assert hit["text"] in held, (hit["source"], hit["start_line"], hit["text"][:60])
        assert hit["end_line"] - hit["start_line"] == hit["text"].count("\n")
        checked += 1
    return checked


async def lines_found(client: Client, files: dict[str, str], namespace: str = "default"
                      ) -> int:
    found = await call(client, "search_memory", query="cheapest item inventory value",
                       mode="keyword", limit=20, namespace=namespace)
    return check_lines([h for h in found["results"] if h["source"] in files], files)


async def move(settings, source: str, target: str) -> None:
    """zapomni export of ``source``, then zapomni import of the file into ``target``."""
    out = io.BytesIO()
    await export_namespace(settings, source, out, vectors=True, show=False)
    path = Path(settings.ingest_roots) / "export.jsonl.gz"
    path.write_bytes(out.getvalue())
    await run_import(settings, path, target)


async def test_files_starting_with_blank_lines_keep_their_lines(settings, query_service,
                                                                tmp_path):
    """A file that starts with blank lines is stored stripped; its hits still name the
    file's own lines, after an export and import and after updates."""
    settings = msgspec.structs.replace(settings, ingest_roots=str(tmp_path))
    ingested = "\n\n\n  \n" + PYTHON  # four lines before the first line of code
    (tmp_path / "inventory.py").write_text(ingested)
    sent = "\n\n" + GO
    files = {"inventory.py": ingested, "src/lib/inventory.go": sent}
    async with Client(build_server(settings)) as client:
        await call(client, "ingest_path", path=str(tmp_path), include=["*.py"])
        added = await call(client, "add_memory", text=sent, metadata={
            "source": "src/lib/inventory.go", "language": "go"})
        await run_workers(settings)
        assert await lines_found(client, files) >= 4

        await move(settings, "default", "copy")
        assert await lines_found(client, files, "copy") >= 4

        await call(client, "update_memory", memory_id=added["memory_id"],
                   metadata={"importance": 0.9})
        await run_workers(settings)
        assert await lines_found(client, files) >= 4
        files["src/lib/inventory.go"] = "\n" + GO.replace("package inventory", "package stock")
        await call(client, "update_memory", memory_id=added["memory_id"],
                   text=files["src/lib/inventory.go"])
        files["inventory.py"] = "\n" * 7 + PYTHON.replace("cheapest", "cheapest_item")
        (tmp_path / "inventory.py").write_text(files["inventory.py"])
        again = await call(client, "ingest_path", path=str(tmp_path), include=["*.py"])
        await run_workers(settings)
        walked = await call(client, "graph_status", task_id=again["task_id"])
        assert walked["files"]["replaced"] == 1, walked
        found = await call(client, "search_memory", query="cheapest item inventory value",
                           mode="keyword", limit=20)
        hits = [h for h in found["results"] if h["source"] in files]
        assert {h["source"] for h in hits} == set(files)
        assert check_lines(hits, files) >= 4
