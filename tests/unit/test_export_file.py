"""The export file's checks (services/cli/restore.py): every line is read before anything is
queued, and a problem names its line."""

from __future__ import annotations

import gzip

import msgspec
import pytest

from zapomni.services.cli.restore import check_file
from zapomni.shared.protocol.errors import InvalidInput
from zapomni.shared.protocol.export import (
    EXPORT_FORMAT,
    EXPORT_VERSION,
    ExportedChunk,
    ExportedEntity,
    ExportedLink,
    ExportedMemory,
    ExportedRelation,
    ExportHeader,
)

ENTITY = "ent_" + "0" * 24
HEADER = ExportHeader(format=EXPORT_FORMAT, version=EXPORT_VERSION, namespace="notes",
                      model="onnx:test", dim=2, memories=2, chunks=2, vectors=True)


def memory(n: int, **changes) -> ExportedMemory:
    text = f"memory number {n}"
    fields = dict(id=f"mem_{n:032x}", text=text, created_at=1.7e9 + n, chunks=[ExportedChunk(
        idx=0, char_start=0, char_end=len(text), tokens=3, vector=b"\x00" * 8)])
    return ExportedMemory(**{**fields, **changes})


def write(tmp_path, header=HEADER, memories=None, raw: bytes = b"", version1=False):
    memories = (memory(1), memory(2)) if memories is None else memories
    path = tmp_path / "notes.jsonl.gz"
    lines = [msgspec.json.encode(header), *(msgspec.json.encode(m) for m in memories)]
    if version1:  # a version-1 line names no kind
        lines[1:] = [line.replace(b'"kind":"memory",', b"") for line in lines[1:]]
    path.write_bytes(gzip.compress(b"\n".join(lines) + b"\n" + raw))
    return path


def test_a_good_file_is_counted(tmp_path):
    checked = check_file(write(tmp_path))
    assert (checked.header.namespace, checked.memories, checked.chunks) == ("notes", 2, 2)


def test_a_header_without_memories_is_an_empty_import(tmp_path):
    assert check_file(write(tmp_path, memories=())).memories == 0


@pytest.mark.parametrize("memories, raw, says", [
    ((memory(1), memory(2, text="")), b"", "line 3: text: must not be empty"),
    ((memory(1, chunks=[ExportedChunk(idx=0, char_start=0, char_end=99, vector=b"\0" * 8)]),),
     b"", "line 2: chunk 0 spans characters 0-99 of a text of 15"),
    ((memory(1, chunks=[ExportedChunk(idx=0, char_start=0, char_end=5, vector=b"\0" * 4)]),),
     b"", "line 2: chunk 0 has no vector of 2 float32 values"),
    ((memory(1),), b'{"id": "mem_', "line 3: not a JSON object"),
    ((memory(1),), b'{"kind": "memory", "id": "mem_1", "text": "x", "created_at": 1}',
     "line 3: id"),
    ((memory(1),), b'{"id": "mem_1", "text": "x", "created_at": 1}',
     "line 3: kind: one of 'memory', 'entity' or 'relation'"),
    ((memory(1),), b'{"kind": "entity", "id": "Robert"}', "line 3: id"),
    ((memory(1), ExportedEntity(id=ENTITY, props={"name": "Cape Wrath"})),
     b'{"kind": "relation", "type": "RELATED]->() DELETE", "a": "%s", "b": "%s"}'
     % (ENTITY.encode(), ENTITY.encode()), "line 4: type"),
    ((memory(1),), b'{"kind": "entity", "id": "%s", "props": {"where": {"x": 1}}}'
     % ENTITY.encode(), "line 3: props"),
    ((memory(1, chunks=[ExportedChunk(idx=0, char_start=0, char_end=5, vector=b"\0" * 8,
                                      entities_at=1.0, pairs=["ent_1 ent_2"])]),),
     b"", "line 2: chunks[0].pairs[0]"),
])
def test_a_bad_line_is_named(tmp_path, memories, raw, says):
    with pytest.raises(InvalidInput) as refused:
        check_file(write(tmp_path, memories=memories, raw=raw))
    assert says in refused.value.message, refused.value.message
    assert refused.value.message.endswith("nothing was imported. Use a file written by "
                                          "`zapomni export`")


def test_another_format_version_is_refused(tmp_path):
    header = msgspec.structs.replace(HEADER, version=3)
    with pytest.raises(InvalidInput, match="line 1: format version 3; this Zapomni reads "
                                           "versions 1 and 2"):
        check_file(write(tmp_path, header=header))


def test_a_version_1_file_of_memories_only_is_read(tmp_path):
    header = msgspec.structs.replace(HEADER, version=1)
    checked = check_file(write(tmp_path, header=header, version1=True))
    assert (checked.header.version, checked.memories, checked.graph) == (1, 2, 0)


def test_the_graph_lines_are_counted(tmp_path):
    chunk = ExportedChunk(idx=0, char_start=0, char_end=6, vector=b"\0" * 8, entities_at=1.0,
                          links=[ExportedLink(type="MENTIONS", entity=ENTITY,
                                              props={"count": 2, "type": "place"})])
    lines = (memory(1, chunks=[chunk]), ExportedEntity(id=ENTITY, props={"name": "Cape"}),
             ExportedRelation(type="SAME_AS", a=ENTITY, b=ENTITY, props={"by": ["a", "b"]}))
    checked = check_file(write(tmp_path, header=msgspec.structs.replace(HEADER, graph=True),
                               memories=lines))
    assert (checked.memories, checked.chunks, checked.graph) == (1, 1, 2)


def test_an_empty_file_is_refused(tmp_path):
    path = tmp_path / "empty.jsonl.gz"
    path.write_bytes(gzip.compress(b""))
    with pytest.raises(InvalidInput, match="the file is empty"):
        check_file(path)
