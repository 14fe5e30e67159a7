"""The ingest_path tool: a folder under ZAPOMNI_INGEST_ROOTS walked by a real worker and its
files added; any path out of the roots refused at the front, with nothing queued."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import msgspec
import pytest
from fastmcp import Client

from tests.support.documents import make_docx, make_pdf
from tests.support.mcp import call, error
from tests.support.workers import run_workers
from zapomni.services.mcp.server import build_server
from zapomni.shared.tasks.capacity import QUEUE_NAME
from zapomni.workers import files as files_worker

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
    assert await aredis.zcard(QUEUE_NAME) == 0
    assert not await aredis.keys("zapomni:task:*")


def slices_that_change_the_tree(monkeypatch, change) -> list[str]:
    """Each slice of the files task reads one file (its budget: none), and ``change()``
    runs once, as the first continuation is queued: between two slices. Returns where
    each continuation queued starts (its ``after``; an older version's ``start``)."""
    queued = []
    enqueue = files_worker.enqueue_files

    async def enqueue_and_change(redis, settings, job, **kwargs) -> None:
        if not queued:
            change()
        queued.append(getattr(job, "after", None) or str(getattr(job, "start", "")))
        await enqueue(redis, settings, job, **kwargs)

    monkeypatch.setattr(files_worker, "SLICE_SECONDS", 0.0)
    monkeypatch.setattr(files_worker, "enqueue_files", enqueue_and_change)
    return queued


@pytest.fixture
def five(roots: Path) -> Path:
    tree = roots / "five"
    (tree / "sub").mkdir(parents=True)
    for name in ("b.txt", "d.txt", "f.txt", "sub/h.txt", "sub/j.txt"):
        (tree / name).write_text(f"The keeper's note {name} mentions a {name[-5]}-buoy.")
    return tree


async def ingest_in_slices(client, settings, roots, tree) -> dict:
    task = await call(client, "ingest_path", path=str(tree))
    await run_workers(msgspec.structs.replace(settings, ingest_roots=str(roots)))
    status = await call(client, "graph_status", task_id=task["task_id"])
    assert status["state"] == "done", status
    return status["files"]


async def stored_sources(client) -> list[str]:
    listed = await call(client, "list_memories", limit=50)
    return sorted(m["source"] for m in listed["memories"])


async def test_a_file_added_between_slices_moves_no_file_to_be_read_twice(
        client, settings, roots, five, monkeypatch):
    """a.txt, added behind the cursor, is left to the next run; e.txt, ahead of it, is read
    once; b.txt, before them both, is not read again (it was, by position)."""
    def add() -> None:
        (five / "a.txt").write_text("A note added behind the walk.")
        (five / "e.txt").write_text("A note added ahead of the walk.")

    queued = slices_that_change_the_tree(monkeypatch, add)
    files = await ingest_in_slices(client, settings, roots, five)
    assert (files["found"], files["added"], files["skipped"]) == (6, 6, 0), files
    assert await stored_sources(client) == ["b.txt", "d.txt", "e.txt", "f.txt", "sub/h.txt",
                                            "sub/j.txt"]
    assert queued == ["b.txt", "d.txt", "e.txt", "f.txt", "sub/h.txt", "sub/j.txt"]


async def test_a_file_removed_between_slices_moves_no_file_to_be_skipped(
        client, settings, roots, five, monkeypatch):
    """b.txt, read and then removed behind the cursor, does not make d.txt go unread."""
    slices_that_change_the_tree(monkeypatch, (five / "b.txt").unlink)
    files = await ingest_in_slices(client, settings, roots, five)
    assert (files["found"], files["added"], files["skipped"]) == (5, 5, 0), files
    assert await stored_sources(client) == ["b.txt", "d.txt", "f.txt", "sub/h.txt",
                                            "sub/j.txt"]


async def test_nothing_out_of_the_roots_is_read_whatever_changes_after_the_walk(
        client, settings, roots, monkeypatch):
    """notes.txt is swapped for a link to the secret after the walk found it (acted at the
    seam between walk and read); a hard link to the secret sits in the tree; a DOCX unpacks
    past its bound. Each is skipped with its reason, and none of the secret is stored."""
    tree, secret = roots / "lighthouse", roots.parent / "private" / "secret.md"
    os.link(secret, tree / "linked.md")
    (tree / "bomb.docx").write_bytes(make_docx(["a" * (64 << 20)], "Bomb"))  # 64 MiB: the bound
    load_file = files_worker.load_file

    def swap_then_load(found, key, max_bytes):
        if found.source == "notes.txt":
            (tree / "notes.txt").unlink()
            (tree / "notes.txt").symlink_to(secret)
        return load_file(found, key, max_bytes)

    monkeypatch.setattr(files_worker, "load_file", swap_then_load)
    task = await call(client, "ingest_path", path=str(tree))
    await run_workers(msgspec.structs.replace(settings, ingest_roots=str(roots)))
    files = (await call(client, "graph_status", task_id=task["task_id"]))["files"]
    assert sorted((s["source"], s["reason"].split(":")[0]) for s in files["skips"]) == [
        ("bomb.docx", "too big"), ("linked.md", "a hard link (the file has 2 names)"),
        ("notes.txt", "a symbolic link out of the allowed roots (ZAPOMNI_INGEST_ROOTS)")]
    assert (files["added"], files["skipped"]) == (10, 3)
    assert (await call(client, "search_memory", query="vault", mode="keyword"))["results"] == []
