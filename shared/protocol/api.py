"""The tools' arguments, decoded at the front (strict: unknown fields are refused), and the
receipts the front answers with."""

from __future__ import annotations

from typing import Annotated, Any, get_args

import msgspec
from msgspec import Meta

from zapomni.shared.protocol.base import (
    DEFAULT_NAMESPACE,
    Base,
    Glob,
    Lenient,
    ListOrder,
    MemoryId,
    Namespace,
    Scalar,
    SearchMode,
    SearchRank,
    Tag,
    Thread,
)


class AddMemory(Base):
    text: str  # already stripped; limits checked in shared.validation
    content_hash: str  # sha256 of the text's UTF-8 bytes
    namespace: Namespace = DEFAULT_NAMESPACE
    tags: list[Tag] = []
    source: str = ""
    metadata_json: str = "{}"  # the user's other metadata keys, JSON-encoded once
    thread: str = ""  # metadata "thread": memories of one conversation, in the order added
    # recognised metadata keys (shared/protocol/validation.py, memory_fields), kept in metadata too
    importance: float | None = None  # 0-1
    memory_type: str = ""  # preference, fact, event, instruction, note or any short string
    pinned: bool = False  # never expires, never swept
    expires_at: float = 0.0  # unix seconds; 0: never
    confidence: float | None = None  # 0-1; the write policy's minimum applies to it
    occurred_at: float | None = None  # when what it says happened (unix s); None: when added
    role: str = ""  # who said it: user, assistant, system or tool ('' unsaid)
    supersedes: str = ""  # update_memory: the memory id this text replaces
    # the blank lines stripped from the front of the text: its first line is line
    # line_offset + 1 of the text as sent (a file's), and chunks' lines count from there
    line_offset: int = 0


SEARCH_MODES: tuple[str, ...] = get_args(SearchMode)
SEARCH_RANKS: tuple[str, ...] = get_args(SearchRank)


class SearchFilters(Base):
    tags: Annotated[list[Tag], Meta(max_length=100)] | None = None  # any of them
    tags_all: Annotated[list[Tag], Meta(max_length=100)] | None = None  # all of them
    source: Annotated[str, Meta(min_length=1, max_length=512)] | None = None
    # every source that starts with it: "src/app/" matches "src/app/x.py"
    source_prefix: Annotated[str, Meta(min_length=1, max_length=512)] | None = None
    # event time (occurred_at) from / before, unix seconds (shared/protocol/times.py: the
    # front takes ISO-8601 or unix seconds)
    after: float | None = None
    before: float | None = None
    metadata: Annotated[dict[str, Scalar], Meta(max_length=20)] | None = None  # equality
    # older versions of updated memories (update_memory) are left out unless asked for
    include_superseded: bool = False

    @property
    def active(self) -> bool:
        return any(v is not None for v in (self.tags, self.tags_all, self.source,
                                           self.source_prefix, self.after, self.before,
                                           self.metadata))


class SearchRequest(Base):
    query: Annotated[str, Meta(min_length=1, max_length=2000)]
    limit: Annotated[int, Meta(ge=1, le=100)] = 10
    filters: SearchFilters = SearchFilters()
    namespace: Namespace = DEFAULT_NAMESPACE
    mode: SearchMode = "hybrid"
    min_score: Annotated[float, Meta(ge=0)] = 0.0
    # "memory": relevance blended with recency, frequency and importance (services/query/rank.py)
    rank: SearchRank = "relevance"
    # when the question is asked (unix seconds; None: now): the "now" of time words in the
    # query and of recency (services/query/when.py)
    as_of: float | None = None


class MemoryRef(Base):
    memory_id: MemoryId
    namespace: Namespace = DEFAULT_NAMESPACE


class StatsRequest(Base):
    namespace: Namespace = DEFAULT_NAMESPACE


class BuildGraph(Base):
    namespace: Namespace = DEFAULT_NAMESPACE
    memory_ids: Annotated[list[MemoryId], Meta(min_length=1, max_length=1000)] | None = None
    rebuild: bool = False


class IngestPath(Base):
    """ingest_path's arguments; the path is checked against the allowed roots later
    (shared/text/roots.py, check_ingest_path)."""

    path: Annotated[str, Meta(min_length=1, max_length=4096)]
    namespace: Namespace = DEFAULT_NAMESPACE
    include: Annotated[list[Glob], Meta(max_length=50)] = []
    exclude: Annotated[list[Glob], Meta(max_length=50)] = []


class EntitySearch(Base):
    query: Annotated[str, Meta(min_length=1, max_length=500)]
    type: str | None = None  # one of shared.entities.ENTITY_TYPES, checked at the edge
    limit: Annotated[int, Meta(ge=1, le=100)] = 10
    namespace: Namespace = DEFAULT_NAMESPACE


class EntityRef(Base):
    name_or_id: Annotated[str, Meta(min_length=1, max_length=500)]
    depth: Annotated[int, Meta(ge=1, le=2)] = 1
    namespace: Namespace = DEFAULT_NAMESPACE


class TaskReceipt(Lenient):
    task_id: str
    status: str
    namespace: str = DEFAULT_NAMESPACE


class AddReceipt(Lenient):
    memory_id: str
    task_id: str
    status: str
    duplicate: bool
    namespace: str = DEFAULT_NAMESPACE
    # a duplicate whose metadata differs from the stored one (which was kept): true, and a
    # message pointing at update_memory; absent otherwise
    metadata_changed: bool | msgspec.UnsetType = msgspec.UNSET
    message: str | msgspec.UnsetType = msgspec.UNSET


class DeleteReceipt(Lenient):
    memory_id: str
    task_id: str | None  # None: the memory was not stored (status "gone"); nothing to do
    status: str
    namespace: str = DEFAULT_NAMESPACE
    message: str | msgspec.UnsetType = msgspec.UNSET  # with "gone": what that means


class UpdateMemory(Base):
    """update_memory's arguments, checked (shared/protocol/validation.py, decode_update)."""

    memory_id: MemoryId
    namespace: Namespace = DEFAULT_NAMESPACE
    text: str | None = None  # a new text: a new version that supersedes this one
    content_hash: str = ""  # of the new text
    line_offset: int = 0  # of the new text (AddMemory.line_offset)
    # top-level keys to set; a key set to null is removed (a JSON merge patch)
    patch: dict[str, Any] | None = None


class UpdateReceipt(Lenient):
    memory_id: str  # the new version (a new text), or the memory itself (metadata)
    task_id: str | None  # None when nothing changed
    status: str  # the task's state, "unchanged", or "refused" (the write policy; message why)
    namespace: str = DEFAULT_NAMESPACE
    supersedes: str | msgspec.UnsetType = msgspec.UNSET  # a new text: the version it replaces
    duplicate: bool | msgspec.UnsetType = msgspec.UNSET  # the new text was stored already
    message: str | msgspec.UnsetType = msgspec.UNSET


LIST_ORDERS: tuple[str, ...] = get_args(ListOrder)
MAX_LIST_LIMIT = 200


class ListRequest(Base):
    """A page of a namespace's memories; ``cursor`` is the previous page's next_cursor
    (opaque; read by services/query/listing.py)."""

    namespace: Namespace = DEFAULT_NAMESPACE
    filters: SearchFilters = SearchFilters()
    limit: Annotated[int, Meta(ge=1, le=MAX_LIST_LIMIT)] = 50
    cursor: Annotated[str, Meta(min_length=1, max_length=200)] | None = None
    order: ListOrder = "newest"


class HistoryRequest(Base):
    thread: Thread
    namespace: Namespace = DEFAULT_NAMESPACE
    limit: Annotated[int, Meta(ge=1, le=100)] = 16
    # the cursor, decoded at the front: the oldest turn already seen (its occurred_at and
    # created_at in whole microseconds, its memory id); the page holds the turns before it.
    # None: the newest
    before_us: int | None = None
    before_cu: int = 0
    before_id: str = ""


class ContextRequest(Base):
    query: Annotated[str, Meta(min_length=1, max_length=2000)]
    thread: Thread | None = None  # none: no history, memories only
    namespace: Namespace = DEFAULT_NAMESPACE
    token_budget: Annotated[int, Meta(ge=100, le=100_000)] = 2000
    history_turns: Annotated[int, Meta(ge=0, le=100)] = 16
    memories: Annotated[int, Meta(ge=0, le=50)] = 8
    filters: SearchFilters = SearchFilters()  # which memories may be shown (not the history)
    as_of: float | None = None  # SearchRequest.as_of
    show_ids: bool = False  # the prompt names each memory's id (~30 tokens each)
