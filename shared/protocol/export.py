"""The records of an export file (zapomni export / import, services/cli/moves.py).

Version 2 carries the knowledge graph: each chunk its relationships to entities (``links``:
MENTIONS and any other type, with their properties) and what it contributed (``pairs``, and
``entities_at`` when it was read); after the memories, every Entity node with its
properties, then the relationships between entities. Copied generically: a property or a
relationship type the graph gains travels without a change here. A version-1 file (memories
only) still imports; its entities are then read again by a graph task."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta

from zapomni.shared.protocol.base import Base, MemoryId, Namespace

EXPORT_FORMAT = "zapomni-export"
EXPORT_VERSION = 2
READS = (1, 2)  # the versions an import reads

ENTITY_ID_PATTERN = r"^ent_[0-9a-f]{24}$"  # shared/text/entities.entity_id
EntityId = Annotated[str, Meta(pattern=ENTITY_ID_PATTERN)]
# a relationship type is written into the Cypher of an import: a word of letters, digits and _
RelType = Annotated[str, Meta(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,63}$")]
Pair = Annotated[str, Meta(pattern=r"^ent_[0-9a-f]{24} ent_[0-9a-f]{24}$")]
Scalar = str | int | float | bool
# a node's or relationship's properties as stored (FalkorDB holds scalars and lists of them)
Props = Annotated[dict[Annotated[str, Meta(min_length=1, max_length=64)],
                       Scalar | list[Scalar]], Meta(max_length=64)]


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
    graph: bool = False  # version 2: the file carries the graph (entities and relationships)
    entities: Annotated[int, Meta(ge=0)] = 0  # counted when the export began


class ExportedLink(Base, kw_only=True):
    """A relationship from the chunk to an entity (MENTIONS: ``count`` and ``type``)."""

    type: RelType
    entity: EntityId
    props: Props = {}


class ExportedChunk(Base, kw_only=True):
    """A chunk: its span of the memory's text, (``--vectors``) its vector as little-endian
    float32 bytes (base64 in the JSON line), and (version 2) its part of the graph."""

    idx: Annotated[int, Meta(ge=0)]
    char_start: Annotated[int, Meta(ge=0)]
    char_end: Annotated[int, Meta(ge=0)]
    tokens: Annotated[int, Meta(ge=0)] = 0
    vector: bytes | None = None
    entities_at: float | None = None  # when it was read for entities (None: not yet)
    # the entity pairs it contributed (RELATED's weights count them; workers/store.py keeps
    # at most 128 a chunk: the bound here leaves room)
    pairs: Annotated[list[Pair], Meta(max_length=1024)] = []
    links: Annotated[list[ExportedLink], Meta(max_length=4096)] = []
    # a code chunk's dotted names it refers to, defined in the namespace or not (yet)
    code_targets: Annotated[list[Annotated[str, Meta(max_length=1000)]],
                            Meta(max_length=4096)] = []


class ExportedMemory(Base, kw_only=True, tag_field="kind", tag="memory"):
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


class ExportedEntity(Base, kw_only=True, tag_field="kind", tag="entity"):
    """An Entity node: every property it has (``key``, ``name``, ``type``, ...) but its id."""

    id: EntityId
    props: Props = {}


class ExportedRelation(Base, kw_only=True, tag_field="kind", tag="relation"):
    """A relationship between two entities, with its properties. RELATED's ``weight`` and
    ``evidence`` are left out: an import counts them again from the chunks' pairs."""

    type: RelType
    a: EntityId
    b: EntityId
    props: Props = {}


# a line of a version-2 file after the header ("kind" says which)
ExportedLine = ExportedMemory | ExportedEntity | ExportedRelation
