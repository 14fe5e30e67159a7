"""Export files as older versions wrote them, for the import's tests and the moves bench."""

from __future__ import annotations

import gzip

import msgspec

# what version 2 added to a chunk's record (shared/protocol/export.py ExportedChunk)
GRAPH_FIELDS = ("entities_at", "pairs", "links", "code_targets")


def version_1(raw: bytes) -> bytes:
    """An export file as version 1 wrote it: memories without their graph."""
    lines = [msgspec.json.decode(line) for line in gzip.decompress(raw).splitlines()]
    header = {k: v for k, v in lines[0].items() if k not in ("graph", "entities")}
    memories = [{**{k: v for k, v in m.items() if k != "kind"}, "chunks": [
        {k: v for k, v in c.items() if k not in GRAPH_FIELDS}
        for c in m["chunks"]]} for m in lines[1:] if m["kind"] == "memory"]
    return gzip.compress(b"\n".join(msgspec.json.encode(line) for line in
                                    [{**header, "version": 1}, *memories]))
