"""Every value that crosses a process or storage boundary, as one msgspec Struct each.

Tool arguments once decoded, arq job payloads (msgpack), query-service requests and responses
(JSON) and task records. Decode once at the edge; inside, trust the types. New fields get
defaults so that an older process still reads a newer message.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

NAMESPACE_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
MEMORY_ID_PATTERN = r"^mem_[0-9a-f]{32}$"
TASK_ID_PATTERN = r"^task_[0-9a-f]{32}$"

Namespace = Annotated[str, Meta(pattern=NAMESPACE_PATTERN)]
MemoryId = Annotated[str, Meta(pattern=MEMORY_ID_PATTERN)]
TaskId = Annotated[str, Meta(pattern=TASK_ID_PATTERN)]
Tag = Annotated[str, Meta(min_length=1, max_length=128)]
DEFAULT_NAMESPACE = "default"

TaskKind = Literal["ingest", "delete", "graph", "update", "files", "import", "reembed"]
TaskState = Literal["queued", "running", "done", "failed", "cancelled"]
TASK_STATES: tuple[str, ...] = ("queued", "running", "done", "failed", "cancelled")


class Base(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Strict: unknown fields are refused at every edge."""


class Lenient(msgspec.Struct, frozen=True, kw_only=True):
    """For stored records and responses: a newer writer may have added fields."""


JOB_VERSION = 1


class Job(Lenient, kw_only=True):
    """An arq payload. Lenient, so that during a rolling upgrade an older worker still reads
    a newer front's job (new fields always get defaults); ``version`` says which shape the
    writer meant. A job that cannot be read at all fails its task with a message."""

    version: int = JOB_VERSION


# ---- tool arguments, decoded at the front ----------------------------------------------------


class AddMemory(Base):
    text: str  # already stripped; limits checked in shared.validation
    content_hash: str  # sha256 of the text's UTF-8 bytes
    namespace: Namespace = DEFAULT_NAMESPACE
    tags: list[Tag] = []
    source: str = ""
    metadata_json: str = "{}"  # the user's other metadata keys, JSON-encoded once
    thread: str = ""  # metadata "thread": memories of one conversation, in the order added
    # recognised metadata keys (shared/validation.py, memory_fields), kept in metadata too
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


Scalar = str | int | float | bool
SearchMode = Literal["hybrid", "vector", "keyword", "graph"]
SEARCH_MODES: tuple[str, ...] = ("hybrid", "vector", "keyword", "graph")
SearchRank = Literal["relevance", "memory"]
SEARCH_RANKS: tuple[str, ...] = ("relevance", "memory")


class SearchFilters(Base):
    tags: Annotated[list[Tag], Meta(max_length=100)] | None = None  # any of them
    tags_all: Annotated[list[Tag], Meta(max_length=100)] | None = None  # all of them
    source: Annotated[str, Meta(min_length=1, max_length=512)] | None = None
    # every source that starts with it: "src/app/" matches "src/app/x.py"
    source_prefix: Annotated[str, Meta(min_length=1, max_length=512)] | None = None
    # event time (occurred_at) from / before, unix seconds (shared/times.py: the front takes
    # ISO-8601 or unix seconds)
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


Glob = Annotated[str, Meta(min_length=1, max_length=256)]


class IngestPath(Base):
    """ingest_path's arguments; the path is checked against the allowed roots later
    (shared/roots.py, check_ingest_path)."""

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


# ---- jobs (arq payloads, msgpack) ------------------------------------------------------------


class IngestJob(Job):
    task_id: str
    memory_id: str
    namespace: str
    text: str
    content_hash: str
    tags: list[str] = []
    source: str = ""
    metadata_json: str = "{}"
    created_at: float = 0.0
    thread: str = ""
    after: str = ""  # the memory added just before this one to the same thread
    gen: int = 0  # the claim's generation: a newer claim's writes win over an older one's
    importance: float | None = None
    memory_type: str = ""
    pinned: bool = False
    expires_at: float = 0.0  # 0: never
    supersedes: str = ""  # the memory this one replaces once it is searchable
    line_offset: int = 0  # AddMemory.line_offset
    occurred_at: float | None = None  # AddMemory.occurred_at; None: created_at
    role: str = ""


class BatchJob(Job):
    """Ingest the memories the add path gathered under ``batch_id`` (shared/adds.py): small
    ones added to one namespace while its batch waited for a worker, embedded and written
    together; or, ``alone``, one large memory (it may fan out into parts)."""

    batch_id: str
    namespace: str
    alone: bool = False


class ChunkSpan(Lenient):
    idx: int
    text: str
    char_start: int
    char_end: int
    tokens: int
    # 1-based lines of the text as sent the chunk spans, inclusive: the memory's text
    # starts on line line_offset + 1 (0: not computed, a part job written before lines were)
    start_line: int = 0
    end_line: int = 0


class PartJob(Job):
    """One bounded embed-and-write job of a document that fanned out."""

    task_id: str
    memory_id: str
    namespace: str
    part: int
    parts: int
    chunk_count: int
    chunks: list[ChunkSpan]


class DeleteJob(Job):
    task_id: str
    memory_id: str
    namespace: str
    reason: str = ""  # why, when not asked for (the expiry sweep): kept in the task's message


class GraphJob(Job):
    """Plan a graph task: which chunks to process (clearing first on rebuild), then parts."""

    task_id: str
    namespace: str
    memory_ids: list[str] | None = None
    rebuild: bool = False


class GraphPartJob(Job):
    """One part of a graph task: the chunks after ``after`` up to ``last`` (in id order) of
    the namespace, or of ``memory_ids``. ``seq``: which continuation of the part this is."""

    task_id: str
    namespace: str
    part: int
    parts: int
    chunk_ids: list[str] = []  # parts planned by earlier versions named their chunks
    rebuild: bool = False
    memory_ids: list[str] | None = None
    after: str = ""
    last: str = ""
    seq: int = 0


MAX_SKIPS_SHOWN = 100  # skipped files a files task lists with their reasons


class SkippedFile(Lenient):
    source: str
    reason: str


class FileCounts(Lenient):
    """What a files task (ingest_path) has done so far; kept in its record as JSON."""

    found: int = 0  # files walked
    added: int = 0
    unchanged: int = 0  # the same bytes as stored for that source
    replaced: int = 0  # changed: added anew, the old memory deleted
    skipped: int = 0
    skips: list[SkippedFile] = []  # the first MAX_SKIPS_SHOWN


class FilesJob(Job):
    """ingest_path: walk ``path`` (resolved, inside ZAPOMNI_INGEST_ROOTS) and add its files.
    A continuation walks on from the file after ``after`` (a source, in the walk's fixed
    order: shared/files.py, walk_key) with the counts so far and ``walked``, the files the
    walk found before it, so a run of any slice again writes the same counts. (A job of an
    older version, with ``start``, walks again from the first file: its adds are
    duplicates, left alone.)"""

    task_id: str
    namespace: str
    path: str
    include: list[str] = []
    exclude: list[str] = []
    counts: FileCounts = FileCounts()
    after: str = ""
    walked: int = 0


# ---- task records (Redis hash) --------------------------------------------------------------


class TaskRecord(Lenient):
    task_id: str
    kind: str
    namespace: str
    state: str = "queued"
    memory_id: str = ""
    done: int = 0
    total: int = 0
    created_at: float = 0.0
    started_at: float = 0.0
    finished_at: float = 0.0
    heartbeat_at: float = 0.0
    worker: str = ""
    attempts: int = 0
    message: str = ""  # what is happening now, e.g. "waiting: embedder unreachable"
    error: str = ""
    entities: int = 0  # graph tasks: Entity nodes and RELATED edges this task created
    relations: int = 0
    graph_task_id: str = ""  # ingest and import tasks: the entity extraction that followed
    after: str = ""  # ingest tasks in a thread: the memory added to it just before
    gen: int = 0  # ingest tasks: the claim's generation (shared/tasks.py)
    # ingest and update tasks: shared/validation.metadata_digest of the metadata they write,
    # so that the same text added again can say whether its metadata differs
    meta_hash: str = ""
    previous: str = ""  # update tasks: the task that owned the memory before, given it back
    files: str = ""  # files tasks: a FileCounts as JSON
    embedded: int = 0  # import and reembed tasks: chunks embedded (not reused from a file)
    chunks: int = 0  # ingest tasks: the memory's chunks, once it is chunked
    parts_at: float = 0.0  # ingest tasks: when its parts were queued (their rate: the ETA)
    batch: str = ""  # ingest tasks: the arq job that holds it as added (shared/adds.py)


class TaskProgress(Lenient):
    done: int
    total: int
    percent: float  # 0-100


class TaskStatus(Lenient):
    """A task as graph_status and cancel_task answer it (services/mcp/task_status.py)."""

    task_id: str
    kind: str
    namespace: str
    state: str
    memory_id: str | None
    progress: TaskProgress
    created_at: str | None  # ISO-8601, UTC
    started_at: str | None
    finished_at: str | None
    seconds: float | None
    worker: str | None
    attempts: int
    message: str | None
    error: str | None
    # ingest tasks: the graph task that extracts their entities
    graph_task_id: str | None | msgspec.UnsetType = msgspec.UNSET
    # graph tasks: chunks/s, seconds left while running, what they created
    rate_chunks_per_s: float | msgspec.UnsetType = msgspec.UNSET
    eta_seconds: float | None | msgspec.UnsetType = msgspec.UNSET
    entities_created: int | msgspec.UnsetType = msgspec.UNSET
    relations_created: int | msgspec.UnsetType = msgspec.UNSET
    # files tasks (ingest_path): what was done with the files so far
    files: FileCounts | msgspec.UnsetType = msgspec.UNSET


# ---- query service (JSON) -------------------------------------------------------------------


class SignalMatch(Lenient):
    rank: int  # 1 = this signal's best candidate
    score: float  # the signal's own score: cosine similarity, or full-text TF-IDF
    # "time" (time words in the query: services/query/when.py): the words, the window of
    # event time they name (ISO-8601, either end may be open) and the points the memory's
    # event time added to its score. "currency" (services/query/currency.py): the memory
    # this one is older than (newer) or newer than (older), about the same thing
    words: str | msgspec.UnsetType = msgspec.UNSET
    window: list[str | None] | msgspec.UnsetType = msgspec.UNSET
    points: float | msgspec.UnsetType = msgspec.UNSET
    newer: str | msgspec.UnsetType = msgspec.UNSET
    older: str | msgspec.UnsetType = msgspec.UNSET


class MoreMatch(Lenient):
    """A further match of a result's memory, past the per-memory cap (max_per_memory)."""

    chunk_id: str
    char_start: int
    char_end: int
    score: float


class PartsDone(Lenient):
    """A memory still ingesting: the parts of it written (searchable) so far, of all."""

    done: int
    total: int


class SearchHit(Lenient):
    memory_id: str
    chunk_id: str
    text: str
    score: float  # the mode's score: see search_memory's description
    char_start: int
    char_end: int
    tags: list[str]
    source: str
    metadata: dict[str, Any]
    created_at: str
    occurred_at: str = ""  # when what it says happened (metadata occurred_at, else created_at)
    # a memory that says something different about the same thing happened later: it may
    # be outdated (services/query/currency.py)
    outdated_by: str | msgspec.UnsetType = msgspec.UNSET
    # the lines of the memory's text the passage spans (1-based, inclusive): for source
    # code, where in the file it is. Null for memories stored before lines were recorded
    start_line: int | None = None
    end_line: int | None = None
    why: dict[str, SignalMatch] = {}  # which signals found it, and where they ranked it
    also_matched: int = 0  # other overlapping chunks of this memory that matched, folded in
    entities: list[str] = []  # the named things this passage mentions
    # rank="memory": relevance, recency, frequency, importance, each with its weight and the
    # points it adds; the points sum to the score. Empty for rank="relevance"
    rank_parts: dict[str, RankPart] = {}
    # the memory's further matches past the per-memory cap, best first (only on its best
    # result): read them with get_memory and these offsets
    more: list[MoreMatch] = []
    # present only while the memory is still being ingested: "ingesting", and how many of
    # its parts are written (searchable) so far; the rest of it is not found yet
    status: str | msgspec.UnsetType = msgspec.UNSET
    parts: PartsDone | msgspec.UnsetType = msgspec.UNSET


class SearchResponse(Lenient):
    namespace: str
    query: str
    results: list[SearchHit]
    mode: str = "hybrid"
    note: str | None = None  # why there are no results, where a mode can say (graph)
    rank: str = "relevance"


class MemoryRecord(Lenient):
    memory_id: str
    namespace: str
    text: str
    tags: list[str]
    source: str
    metadata: dict[str, Any]
    created_at: str
    chunk_count: int
    # "ready", "ingesting" or "expired" (left out of every other read); "queued": added, its
    # ingest not started yet (the front answers it from the task and its queued job)
    status: str
    occurred_at: str = ""  # SearchHit.occurred_at
    # update_memory: the newer version that replaced this one (absent while it is current)
    superseded_by: str | msgspec.UnsetType = msgspec.UNSET
    # every version, oldest first (absent when the memory has only one)
    versions: list[Version] | msgspec.UnsetType = msgspec.UNSET
    # while ingesting: the parts written (searchable) so far, of all (absent for a memory of
    # one part, and once it is ready)
    parts: PartsDone | msgspec.UnsetType = msgspec.UNSET
    # while queued or ingesting: the task that writes it (graph_status shows how far it got)
    task_id: str | msgspec.UnsetType = msgspec.UNSET


class Stats(Lenient):
    namespace: str
    memories: int
    chunks: int
    memories_ingesting: int
    queue_depth: int
    workers_alive: int
    tasks: dict[str, int]
    embedding_model: str = ""
    embedding_dim: int = 0
    entities: int = 0
    relations: int = 0


class EntityHit(Lenient):
    entity_id: str
    name: str
    type: str
    mentions: int  # chunks that mention it


class EntityList(Lenient):
    namespace: str
    query: str
    results: list[EntityHit]


class Neighbour(Lenient):
    entity_id: str
    name: str
    type: str
    weight: int  # chunks in which the two share a sentence
    depth: int  # 1: related to the entity; 2: related to one of those
    via: str = ""  # depth 2: the depth-1 neighbour it is related through


class Passage(Lenient):
    memory_id: str
    chunk_id: str
    text: str
    count: int  # mentions in this passage


class EntityDetail(Lenient):
    namespace: str
    entity: EntityHit
    neighbours: list[Neighbour]
    passages: list[Passage]


class TaskReceipt(Lenient):
    task_id: str
    status: str
    namespace: str = DEFAULT_NAMESPACE


class ErrorBody(Lenient):
    kind: str
    message: str


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


# ---- update (update_memory, versions) -------------------------------------------------------


class UpdateMemory(Base):
    """update_memory's arguments, checked (shared/validation.py, decode_update)."""

    memory_id: MemoryId
    namespace: Namespace = DEFAULT_NAMESPACE
    text: str | None = None  # a new text: a new version that supersedes this one
    content_hash: str = ""  # of the new text
    line_offset: int = 0  # of the new text (AddMemory.line_offset)
    # top-level keys to set; a key set to null is removed (a JSON merge patch)
    patch: dict[str, Any] | None = None


class UpdateJob(Job):
    """A metadata change applied in place: the whole new metadata (idempotent)."""

    task_id: str
    memory_id: str
    namespace: str
    tags: list[str] = []
    source: str = ""
    metadata_json: str = "{}"
    importance: float | None = None
    memory_type: str = ""
    pinned: bool = False
    expires_at: float = 0.0  # 0: never
    occurred_at: float | None = None  # None: when the memory was added
    role: str = ""


class Version(Lenient):
    """One version of an updated memory, in get_memory's list."""

    memory_id: str
    created_at: str
    status: str  # "ready" or "ingesting"
    current: bool  # the version search returns


class UpdateReceipt(Lenient):
    memory_id: str  # the new version (a new text), or the memory itself (metadata)
    task_id: str | None  # None when nothing changed
    status: str  # the task's state, "unchanged", or "refused" (the write policy; message why)
    namespace: str = DEFAULT_NAMESPACE
    supersedes: str | msgspec.UnsetType = msgspec.UNSET  # a new text: the version it replaces
    duplicate: bool | msgspec.UnsetType = msgspec.UNSET  # the new text was stored already
    message: str | msgspec.UnsetType = msgspec.UNSET

# ---- lifecycle: list_memories, the expiry sweep, the write policy ---------------------------

ListOrder = Literal["newest", "oldest"]
LIST_ORDERS: tuple[str, ...] = ("newest", "oldest")
MAX_LIST_LIMIT = 200


class ListRequest(Base):
    """A page of a namespace's memories; ``cursor`` is the previous page's next_cursor
    (opaque; read by services/query/listing.py)."""

    namespace: Namespace = DEFAULT_NAMESPACE
    filters: SearchFilters = SearchFilters()
    limit: Annotated[int, Meta(ge=1, le=MAX_LIST_LIMIT)] = 50
    cursor: Annotated[str, Meta(min_length=1, max_length=200)] | None = None
    order: ListOrder = "newest"


class ListedMemory(Lenient):
    memory_id: str
    first_line: str  # the text's first line, at most 200 characters (cut with an ellipsis)
    tags: list[str]
    source: str
    metadata: dict[str, Any]
    created_at: str
    chunk_count: int
    state: str  # "ready" or "ingesting"
    occurred_at: str = ""  # SearchHit.occurred_at: the order of the list
    task_id: str | None = None  # while ingesting: the task graph_status follows


class MemoryPage(Lenient):
    namespace: str
    memories: list[ListedMemory]
    next_cursor: str | None = None  # null on the last page


class Refused(Lenient, kw_only=True):
    """A write the namespace's write policy refused: nothing stored, no task (not an error)."""

    stored: bool = False
    reason: str
    namespace: str = DEFAULT_NAMESPACE

# ---- rank ----------------------------------------------------------------------------------


class RankPart(Lenient):
    """One part of a rank="memory" score: ``value`` (0-1) times ``weight`` adds ``points``.
    ``basis``: what the value was computed from (relevance: the mode's score; recency: the
    memory's age in days; frequency: how often search has returned it; importance: its
    metadata importance, null when it has none and 0.5 is assumed)."""

    value: float
    weight: float
    points: float
    basis: float | None = None

# ---- context: get_history and build_context (shared/conversation.py, services/query/context.py)

Thread = Annotated[str, Meta(min_length=1, max_length=512)]  # metadata "thread", exactly


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


class Turn(Lenient):
    memory_id: str
    text: str  # cut after a number of characters (truncated: true); get_memory has it all
    metadata: dict[str, Any]
    created_at: str
    occurred_at: str = ""  # SearchHit.occurred_at: the order of the history
    role: str | None = None  # metadata role: who said it
    memory_type: str | None = None
    importance: float | None = None
    truncated: bool = False


class History(Lenient):
    namespace: str
    thread: str
    turns: list[Turn]  # oldest first, newest last
    next_before: str | None = None  # pass as before for the turns before these; none: no more


class ContextMemory(Lenient):
    memory_id: str
    text: str  # the passage that matched (a chunk), as search returns it
    score: float
    why: dict[str, SignalMatch]
    metadata: dict[str, Any]
    created_at: str
    memory_type: str  # metadata memory_type, or "note"
    occurred_at: str = ""  # SearchHit.occurred_at
    outdated_by: str | msgspec.UnsetType = msgspec.UNSET  # SearchHit.outdated_by
    # as in search results: only while the memory is still being ingested
    status: str | msgspec.UnsetType = msgspec.UNSET
    parts: PartsDone | msgspec.UnsetType = msgspec.UNSET


class ContextInfo(Lenient):
    history_count: int
    memory_count: int
    total_tokens: int  # of prompt, as returned, counted with the tokenizer named here
    truncated: bool  # turns or memories were left out to stay within token_budget
    tokenizer: str
    token_budget: int


class Context(Lenient):
    namespace: str
    thread: str | None
    history: list[Turn]  # oldest first
    memories: list[ContextMemory]  # best first
    latest_message: str
    metadata: ContextInfo
    prompt: str

# ---- moves: zapomni export / import / reembed (services/cli/moves.py, workers/moves.py) -----

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


class ImportJob(Job, kw_only=True):
    """One batch of an import: memories as the file holds them (vectors reused when the
    file's model and dimension are the worker's, embedded again otherwise)."""

    task_id: str
    namespace: str
    part: int
    parts: int
    model: str
    dim: int
    memories: list[ExportedMemory]


class ReembedJob(Job, kw_only=True):
    """A step of a reembed task: the chunks after ``after`` (in id order) that have no
    vector of the new model yet, a batch at a time, until the step's time share is used."""

    task_id: str
    namespace: str
    after: str = ""
    seq: int = 0  # which step this is (each step enqueues the next under a derived id)
