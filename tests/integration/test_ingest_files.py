"""``zapomni ingest`` end to end: the console script's code against the front over
streamable HTTP, the query service, real worker processes and FalkorDB."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest
from fastmcp import Client

from tests.support.documents import make_docx, make_pdf
from tests.support.mcp import call
from tests.support.servers import ThreadedServer
from tests.support.waiting import eventually
from tests.support.workers import worker_processes
from zapomni.services.cli.ingest import Tally, follow
from zapomni.services.cli.progress import Progress
from zapomni.services.mcp.http import http_app
from zapomni.services.stack.main import main
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.tasks import tasks

TREE = Path(__file__).parent.parent / "data" / "files"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "lighthouse"
    shutil.copytree(TREE, root)
    (root / "docs" / "report.pdf").write_bytes(
        make_pdf(["The beacon uses a fresnel lens."], "Lens Report"))
    (root / "docs" / "log.docx").write_bytes(make_docx(["The kittiwake nests."], "Keeper Log"))
    lamp = root / "code" / "lamp.py"
    lamp.write_text("\n\n\n" + lamp.read_text())  # the code starts on line 4
    return root


@pytest.fixture
def front_url(settings, query_service):
    with ThreadedServer(http_app(settings)) as server, worker_processes(settings, 1):
        yield f"{server.url}/mcp"


async def zapomni_ingest(capsys, *args: str) -> tuple[int, str, str]:
    """The ``zapomni ingest`` command, run as the console script runs it: (exit code, the
    summary it prints, its progress lines)."""
    def run() -> int:
        with pytest.raises(SystemExit) as exit_:
            main(["ingest", *args])
        return exit_.value.code
    code = await asyncio.to_thread(run)
    out, err = capsys.readouterr()
    return code, out, err


async def sources(client: Client) -> dict[str, str]:
    page = await call(client, "list_memories", limit=200)
    return {m["source"]: m["memory_id"] for m in page["memories"]}


async def found(client: Client, word: str) -> list[str]:
    hits = await call(client, "search_memory", query=word, mode="keyword")
    return [hit["source"] for hit in hits["results"]]


@pytest.mark.timeout(600)
async def test_a_folder_is_ingested_then_kept_in_step_with_its_files(tree, front_url, capsys):
    (tree / "blob.bin").write_bytes(b"\x00\x01binary")
    code, out, err = await zapomni_ingest(capsys, str(tree), "--mcp-url", front_url)
    assert code == 0, out
    assert out.splitlines()[0] == ("added 12, unchanged 0, replaced 0, pruned 0, skipped 1, "
                                   "failed 0")
    assert "  skipped lighthouse/blob.bin: binary (not text, PDF or DOCX)" in out
    # stderr is no terminal here: plain progress lines
    assert "zapomni: ingest: 12 / 12 tasks embedded and written" in err
    async with Client(front_url) as client:
        first = await sources(client)
        assert len(first) == 12 and await found(client, "fresnel") == ["lighthouse/docs/report.pdf"]
        memory = await call(client, "get_memory", memory_id=first["lighthouse/code/lamp.py"])
        assert memory["metadata"]["language"] == "python"
        assert memory["metadata"]["type"] == "code"
        lamp = {"source": "lighthouse/code/lamp.py"}
        [hit] = (await call(client, "search_memory", query="albatross wick",
                            mode="keyword", filters=lamp))["results"]
        assert (hit["start_line"], hit["end_line"]) == (4, 6)

        code, out, _ = await zapomni_ingest(capsys, str(tree), "--mcp-url", front_url)
        assert out.splitlines()[0] == ("added 0, unchanged 12, replaced 0, pruned 0, "
                                       "skipped 1, failed 0")
        assert await sources(client) == first

        notes = tree / "notes.txt"
        notes.write_text(notes.read_text().replace("cormorant", "puffin"))
        (tree / "code" / "lamp.go").unlink()
        code, out, _ = await zapomni_ingest(capsys, str(tree), "--mcp-url", front_url, "--prune")
        assert code == 0, out
        assert out.splitlines()[0] == ("added 0, unchanged 10, replaced 1, pruned 1, "
                                       "skipped 1, failed 0")
        now = await sources(client)
        assert set(now) == set(first) - {"lighthouse/code/lamp.go"}
        assert now["lighthouse/notes.txt"] != first["lighthouse/notes.txt"]
        assert await found(client, "cormorant") == []  # none of the old text is found
        assert await found(client, "puffin") == ["lighthouse/notes.txt"]
        assert await found(client, "ocelot") == []

        # a file renamed: its text is still found, though the memory keeps the old name
        (tree / "docs" / "guide.rst").rename(tree / "docs" / "manual.rst")
        code, out, _ = await zapomni_ingest(capsys, str(tree), "--mcp-url", front_url, "--prune")
        assert out.splitlines()[0] == ("added 0, unchanged 10, replaced 0, pruned 0, "
                                       "skipped 2, failed 0")
        assert await sources(client) == now
        (tree / "docs" / "manual.rst").rename(tree / "docs" / "guide.rst")

        # a narrower run with --prune: the files its --include leaves out are not gone
        code, out, _ = await zapomni_ingest(capsys, str(tree), "--mcp-url", front_url, "--prune",
                                            "--include", "*.py")
        assert out.splitlines()[0] == ("added 0, unchanged 1, replaced 0, pruned 0, "
                                       "skipped 0, failed 0")
        assert await sources(client) == now


async def test_include_exclude_and_namespace(tree, front_url, capsys):
    code, out, _ = await zapomni_ingest(capsys, str(tree), "--mcp-url", front_url, "--include",
                                        "*.py", "--include", "*.md", "--exclude", "README*",
                                        "--namespace", "code")
    assert code == 0 and out.splitlines()[0].startswith("added 1, unchanged 0")
    async with Client(front_url) as client:
        page = await call(client, "list_memories", namespace="code")
        assert [m["source"] for m in page["memories"]] == ["lighthouse/code/lamp.py"]
        assert (await call(client, "list_memories"))["memories"] == []


async def test_files_of_two_roots_keep_apart_and_progress_reads_as_english(
        tmp_path, front_url, capsys):
    """Two roots with a file of the same name: each source begins with its root's name, so
    source_prefix tells them apart; the plain progress lines say "1 file read"."""
    for name, word in (("json", "albatross"), ("asyncio", "cormorant")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"# the {word} package\n")
        (tmp_path / name / "__pycache__").mkdir()
        (tmp_path / name / "__pycache__" / "x.pyc").write_bytes(b"\x00compiled")
    code, out, err = await zapomni_ingest(capsys, str(tmp_path / "json"),
                                          str(tmp_path / "asyncio"), "--mcp-url", front_url)
    assert (code, out.splitlines()[0]) == (0, "added 2, unchanged 0, replaced 0, pruned 0, "
                                              "skipped 0, failed 0")  # no __pycache__
    assert "zapomni: ingest: 2 files read" in err
    async with Client(front_url) as client:
        assert set(await sources(client)) == {"json/__init__.py", "asyncio/__init__.py"}
        hits = await call(client, "search_memory", query="albatross cormorant",
                          mode="keyword", filters={"source_prefix": "asyncio/"})
        assert [h["source"] for h in hits["results"]] == ["asyncio/__init__.py"]
    code, out, err = await zapomni_ingest(capsys, str(tmp_path / "json" / "__init__.py"),
                                          "--mcp-url", front_url)
    assert "zapomni: ingest: 1 file read" in err and "1 files" not in err
    assert out.splitlines()[0].startswith("added 0, unchanged 0, replaced 0, pruned 0, "
                                          "skipped 1")  # the same text as json/__init__.py


async def test_ingest_says_what_it_waits_for(tmp_path, settings, query_service, capsys):
    """With no worker running yet, the progress says so instead of sitting at 0."""
    (tmp_path / "one.md").write_text("The keeper lit the lamp at dusk.")
    seen: list[str] = []

    async def stderr() -> str:
        seen.append(capsys.readouterr().err)
        return "".join(seen)
    with ThreadedServer(http_app(settings)) as server:
        running = asyncio.create_task(zapomni_ingest(capsys, str(tmp_path / "one.md"),
                                                     "--mcp-url", f"{server.url}/mcp"))
        await eventually(stderr, lambda err: "(waiting for workers: 1 queued)" in err,
                         "a progress line that names the wait")
        with worker_processes(settings, 1):
            code, out, _ = await running
    assert code == 0 and out.startswith("added 1,")
    assert "zapomni: ingest: 1 / 1 task embedded and written" in "".join(seen) + _


async def test_a_file_whose_text_another_holds_is_one_memory_and_says_so(tmp_path, front_url,
                                                                         capsys):
    """Two files of one run with the same text: one memory, one task followed; the progress
    and the summary say which file holds the other's text (not "N queued", then N-1)."""
    root = tmp_path / "copies"
    root.mkdir()
    for name in ("a.txt", "b.txt"):
        (root / name).write_text("The puffin returns in April.")
    (root / "c.txt").write_text("The gannet dives from thirty metres.")
    code, out, err = await zapomni_ingest(capsys, str(root), "--mcp-url", front_url)
    assert code == 0, out
    assert out.splitlines() == [
        "added 2, unchanged 0, replaced 0, pruned 0, skipped 1, failed 0",
        "  skipped copies/b.txt: the same text as copies/a.txt: one memory holds both"]
    assert "3 files read, " in err and \
        "(2 tasks queued; 1 file holds the text of another)" in err
    assert "zapomni: ingest: 2 / 2 tasks embedded and written" in err
    (root / "d.txt").write_text("The gannet dives from thirty metres.")  # another run
    code, out, _ = await zapomni_ingest(capsys, str(root), "--mcp-url", front_url)
    assert out.splitlines() == [
        "added 0, unchanged 2, replaced 0, pruned 0, skipped 2, failed 0",
        "  skipped copies/b.txt: the same text as copies/a.txt: one memory holds both",
        "  skipped copies/d.txt: the same text as copies/c.txt: one memory holds both"]


async def test_the_count_moves_with_tasks_that_end_behind_one_that_waits(front_url, settings,
                                                                         aredis):
    """The oldest task waits (its record says a retry is coming); a task behind it ends:
    the count says so at once, and the note is the waiting task's words."""
    async with Client(front_url) as client:
        added = await call(client, "add_memory", text="The kittiwake nests on the cliff.")

        async def state() -> str:
            return (await call(client, "graph_status", task_id=added["task_id"]))["state"]
        await eventually(state, lambda s: s == "done", "the memory written", timeout=300)
        waiting = TaskRecord(task_id="task_" + "1" * 32, kind="ingest", namespace="default",
                             created_at=time.time())
        await tasks.create_task(aredis, waiting, ttl=3600)
        said = "waiting: the job ran over its time limit; attempt 1 of 8, retrying in 4s"
        await tasks.move(aredis, waiting.task_id, "running", ttl=3600, message=said)
        tally = Tally(tasks={waiting.task_id: "slow.txt", added["task_id"]: "kittiwake.txt"})
        progress = Progress("ingest", 2, ("task", "tasks"), quiet=True)
        following = asyncio.create_task(follow(client, tally, progress))
        try:
            async def shown() -> tuple[int, str]:
                return progress.done, progress.note
            assert await eventually(shown, lambda seen: seen[0] == 1,
                                    "the task behind the waiting one counted") == (1, said)
            await tasks.move(aredis, waiting.task_id, "done", ttl=3600, message="")
            await asyncio.wait_for(following, 60)
        finally:
            following.cancel()
    assert (tally.ended, tally.failed) == (2, [])


def test_a_front_that_is_not_there_is_one_clear_line(tree):
    with pytest.raises(SystemExit) as exit_:
        main(["ingest", str(tree), "--mcp-url", "http://127.0.0.1:9/mcp"])
    assert str(exit_.value.code).startswith(
        "zapomni ingest: cannot talk to the MCP front at http://127.0.0.1:9/mcp")
    with pytest.raises(SystemExit) as exit_:
        main(["ingest", str(tree / "nothing")])
    assert exit_.value.code == f"zapomni ingest: {tree / 'nothing'}: no such file or folder"
