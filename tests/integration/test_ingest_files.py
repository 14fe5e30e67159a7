"""``zapomni ingest`` end to end: the console script's code against the front over
streamable HTTP, the query service, real worker processes and FalkorDB."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from fastmcp import Client

from tests.support.documents import make_docx, make_pdf
from tests.support.mcp import call
from tests.support.servers import ThreadedServer
from tests.support.workers import worker_processes
from zapomni.services.mcp.http import http_app
from zapomni.services.stack.main import main

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
    code, out, err = await zapomni_ingest(capsys, str(tree), "--url", front_url)
    assert code == 0, out
    assert out.splitlines()[0] == ("added 12, unchanged 0, replaced 0, pruned 0, skipped 1, "
                                   "failed 0")
    assert "  skipped blob.bin: binary (not text, PDF or DOCX)" in out
    assert "12/12 written" in err  # stderr is no terminal here: plain progress lines
    async with Client(front_url) as client:
        first = await sources(client)
        assert len(first) == 12 and await found(client, "fresnel") == ["docs/report.pdf"]
        memory = await call(client, "get_memory", memory_id=first["code/lamp.py"])
        assert memory["metadata"]["language"] == "python"
        assert memory["metadata"]["type"] == "code"
        [hit] = (await call(client, "search_memory", query="albatross wick",
                            mode="keyword", filters={"source": "code/lamp.py"}))["results"]
        assert (hit["start_line"], hit["end_line"]) == (4, 6)

        code, out, _ = await zapomni_ingest(capsys, str(tree), "--url", front_url)
        assert out.splitlines()[0] == ("added 0, unchanged 12, replaced 0, pruned 0, "
                                       "skipped 1, failed 0")
        assert await sources(client) == first

        notes = tree / "notes.txt"
        notes.write_text(notes.read_text().replace("cormorant", "puffin"))
        (tree / "code" / "lamp.go").unlink()
        code, out, _ = await zapomni_ingest(capsys, str(tree), "--url", front_url, "--prune")
        assert code == 0, out
        assert out.splitlines()[0] == ("added 0, unchanged 10, replaced 1, pruned 1, "
                                       "skipped 1, failed 0")
        now = await sources(client)
        assert set(now) == set(first) - {"code/lamp.go"}
        assert now["notes.txt"] != first["notes.txt"]
        assert await found(client, "cormorant") == []  # none of the old text is found
        assert await found(client, "puffin") == ["notes.txt"]
        assert await found(client, "ocelot") == []

        # a narrower run with --prune: the files its --include leaves out are not gone
        code, out, _ = await zapomni_ingest(capsys, str(tree), "--url", front_url, "--prune",
                                            "--include", "*.py")
        assert out.splitlines()[0] == ("added 0, unchanged 1, replaced 0, pruned 0, "
                                       "skipped 0, failed 0")
        assert await sources(client) == now


async def test_include_exclude_and_namespace(tree, front_url, capsys):
    code, out, _ = await zapomni_ingest(capsys, str(tree), "--url", front_url, "--include",
                                        "*.py", "--include", "*.md", "--exclude", "README*",
                                        "--namespace", "code")
    assert code == 0 and out.splitlines()[0].startswith("added 1, unchanged 0")
    async with Client(front_url) as client:
        page = await call(client, "list_memories", namespace="code")
        assert [m["source"] for m in page["memories"]] == ["code/lamp.py"]
        assert (await call(client, "list_memories"))["memories"] == []


def test_a_front_that_is_not_there_is_one_clear_line(tree):
    with pytest.raises(SystemExit) as exit_:
        main(["ingest", str(tree), "--url", "http://127.0.0.1:9/mcp"])
    assert str(exit_.value.code).startswith(
        "zapomni ingest: cannot talk to the MCP front at http://127.0.0.1:9/mcp")
    with pytest.raises(SystemExit) as exit_:
        main(["ingest", str(tree / "nothing")])
    assert exit_.value.code == f"zapomni ingest: {tree / 'nothing'}: no such file or folder"
