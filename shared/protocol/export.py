"""The records of an export file (zapomni export / import, services/cli/moves.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta

from zapomni.shared.protocol.base import Base, MemoryId, Namespace

EXPORT_FORMAT = "zapomni-export"
EXPORT_VERSION = 1


class ExportHeader(Base, kw_only=True):
    """The first line of an export file (gzip-compressed JSON lines)."""

    format: Literal["zapomni-export"]
    version: int
    namespace: Namespace
    model: str  # the embedder the namespace was built with
    dim: Annotated[int, Meta(ge=1, le=8192)]
    memories: Annotated[int, Meta(ge=0)]  # counted when the export began
    chunks: Annotated[int, Meta(ge=0)]
    vectors: bool  # whether each chunk carries its vector
    exported_at: float = 0.0


class ExportedChunk(Base, kw_only=True):
    """A chunk: its span of the memory's text, and (``--vectors``) its vector as
    little-endian float32 bytes (base64 in the JSON line)."""

    idx: Annotated[int, Meta(ge=0)]
    char_start: Annotated[int, Meta(ge=0)]
    char_end: Annotated[int, Meta(ge=0)]
    tokens: Annotated[int, Meta(ge=0)] = 0
    vector: bytes | None = None


class ExportedMemory(Base, kw_only=True):
    """One line of an export file after the header: a searchable memory, with its chunks."""

    id: MemoryId
    text: Annotated[str, Meta(min_length=1)]
    content_hash: str = ""
    tags: list[str] = []
    source: str = ""
    metadata: dict[str, Any] = {}
    created_at: float
    thread: str = ""
    after: str = ""  # the memory before it in its thread
    importance: float | None = None
    memory_type: str = ""
    pinned: bool = False
    expires_at: float | None = None
    supersedes: str = ""  # versions (update_memory): the memory this one replaced
    superseded_by: str = ""  # and the one that replaced it
    access_count: int = 0
    accessed_at: float | None = None
    line_offset: Annotated[int, Meta(ge=0)] = 0  # AddMemory.line_offset
    occurred_at: float | None = None  # event time; None (files before it existed): created_at
    role: Literal["", "user", "assistant", "system", "tool"] = ""
    chunks: list[ExportedChunk] = []
