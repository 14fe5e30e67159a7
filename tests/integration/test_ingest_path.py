"""The ingest_path tool: a folder under ZAPOMNI_INGEST_ROOTS walked by a real worker and its
files added; any path out of the roots refused at the front, with nothing queued."""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
import pytest
from fastmcp import Client

from tests.support.documents import make_pdf
from tests.support.mcp import call, error
from tests.support.workers import run_workers
from zapomni.services.mcp.server import build_server

TREE = Path(__file__).parent.parent / "data" / "files"


@pytest.fixture
def roots(tmp_path: Path) -> Path:
    allowed = tmp_path / "allowed"
    shutil.copytree(TREE, allowed / "lighthouse")
    (allowed / "lighthouse" / "report.pdf").write_bytes(make_pdf(["A fresnel lens."], "Lens"))
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "secret.md").write_text("# Secret\nthe vault code is 1234")
    return allowed


@pytest.fixture
async def client(settings, query_service, roots):
    settings = msgspec.structs.replace(settings, ingest_roots=str(roots))
    async with Client(build_server(settings)) as client:
        yield client


async def test_a_folder_under_the_roots_is_ingested_by_a_worker(client, settings, roots):
    tree = roots / "lighthouse"
    (tree / "docs" / "out").symlink_to(roots.parent / "private")  # a link out of the roots
    (tree / "blob.bin").write_bytes(b"\x00binary")
    worker_settings = msgspec.structs.replace(settings, ingest_roots=str(roots))
    task = await call(client, "ingest_path", path=str(tree))
    status = await call(client, "graph_status", task_id=task["task_id"])
    assert (status["kind"], status["state"]) == ("files", "queued")
    await run_workers(worker_settings)
    status = await call(client, "graph_status", task_id=task["task_id"])
    assert status["state"] == "done", status
    assert status["progress"] == {"done": 13, "total": 13, "percent": 100.0}
    files = status["files"]
    assert (files["added"], files["unchanged"], files["replaced"], files["skipped"]) == \
        (11, 0, 0, 2)
    assert sorted((s["source"], s["reason"]) for s in files["skips"]) == [
        ("blob.bin", "binary (not text, PDF or DOCX)"),
        ("docs/out", "a symbolic link out of the allowed roots (ZAPOMNI_INGEST_ROOTS)")]
    listed = await call(client, "list_memories", limit=50)
    assert {m["state"] for m in listed["memories"]} == {"ready"}
    assert len(listed["memories"]) == 11
    hits = await call(client, "search_memory", query="fresnel", mode="keyword")
    assert [h["source"] for h in hits["results"]] == ["report.pdf"]
    assert (await call(client, "search_memory", query="vault", mode="keyword"))["results"] == []

    (tree / "notes.txt").write_text("The logbook now mentions a guillemot.")
    again = await call(client, "ingest_path", path=str(tree), exclude=["*.bin"])
    await run_workers(worker_settings)
    files = (await call(client, "graph_status", task_id=again["task_id"]))["files"]
    assert (files["added"], files["unchanged"], files["replaced"], files["skipped"]) == \
        (0, 10, 1, 1)
    assert (await call(client, "search_memory", query="cormorant",
                       mode="keyword"))["results"] == []
    hits = await call(client, "search_memory", query="guillemot", mode="keyword")
    assert [h["source"] for h in hits["results"]] == ["notes.txt"]


async def test_paths_out_of_the_roots_are_refused_and_nothing_is_queued(client, settings,
                                                                       roots, aredis):
    outside = roots.parent / "private"
    (roots / "escape").symlink_to(outside)
    refused = {
        str(outside): "is outside the folders ingest_path may read",
        str(roots / ".." / "private"): "is outside the folders ingest_path may read",
        str(roots / "escape"): "is outside the folders ingest_path may read",
        str(roots / "escape" / "secret.md"): "is outside the folders ingest_path may read",
        "lighthouse": "path: give an absolute path under one of",
        str(roots / "nothing"): "no such file or folder",
    }
    for path, message in refused.items():
        text = await error(client, "ingest_path", path=path)
        assert message in text, text
        assert "\n" not in text
    assert await aredis.zcard(settings.queue_name) == 0
    assert not await aredis.keys("zapomni:task:*")
