"""The query service's answers (JSON): search hits, memories, entities, listings,
versions, rank and context."""

from __future__ import annotations

from typing import Any

import msgspec

from zapomni.shared.protocol.base import DEFAULT_NAMESPACE, Lenient


class SignalMatch(Lenient):
    rank: int  # 1 = this signal's best candidate
    score: float  # the signal's own score: cosine similarity, or full-text TF-IDF
    # "time" (time words in the query: services/query/when.py): the words, the window of
    # event time they name (ISO-8601, either end may be open) and the points the memory's
    # event time added to its score. "currency" (services/query/timeline.py): the memory
    # this one is older than (newer) or newer than (older), about the same thing
    words: str | msgspec.UnsetType = msgspec.UNSET
    window: list[str | None] | msgspec.UnsetType = msgspec.UNSET
    points: float | msgspec.UnsetType = msgspec.UNSET
    newer: str | msgspec.UnsetType = msgspec.UNSET
    older: str | msgspec.UnsetType = msgspec.UNSET
    # "graph" (services/query/entities.py): the entities the query names that the passage
    # mentions, and the neighbours of those it mentions (neighbour -> the named entity it
    # shares sentences with); a passage is found through one or the other
    entities: list[str] | msgspec.UnsetType = msgspec.UNSET
    via: dict[str, str] | msgspec.UnsetType = msgspec.UNSET


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
    # be outdated (services/query/timeline.py)
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
    # a symbol of source code (type: module, class, function, method or constant): the
    # file and lines of its definition (absent for other entities)
    source: str | msgspec.UnsetType = msgspec.UNSET
    start_line: int | msgspec.UnsetType = msgspec.UNSET
    end_line: int | msgspec.UnsetType = msgspec.UNSET


class Use(Lenient):
    """A passage that refers to a symbol: where, and on which of its lines."""

    memory_id: str
    chunk_id: str
    source: str
    start_line: int | None  # the passage's lines
    end_line: int | None
    lines: list[int]  # the lines of the references in it
    count: int


class Relation(Lenient):
    """A symbol's relation to another: ``kind`` defines, imports, inherits, calls or uses;
    ``direction`` "to" (this symbol -> that one) or "from" (that one -> this one)."""

    kind: str
    direction: str
    entity_id: str
    name: str
    type: str


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
    source: str = ""  # the memory's source, as in search results
    # the lines of the memory's text the passage spans (SearchHit.start_line / end_line)
    start_line: int | None = None
    end_line: int | None = None


class EntityDetail(Lenient):
    namespace: str
    entity: EntityHit
    neighbours: list[Neighbour]
    passages: list[Passage]
    # a symbol of source code: the passages that refer to it, and its typed relations
    uses: list[Use] | msgspec.UnsetType = msgspec.UNSET
    relations: list[Relation] | msgspec.UnsetType = msgspec.UNSET


class ErrorBody(Lenient):
    kind: str
    message: str


class Version(Lenient):
    """One version of an updated memory, in get_memory's list."""

    memory_id: str
    created_at: str
    status: str  # "ready" or "ingesting"
    current: bool  # the version search returns


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


class RankPart(Lenient):
    """One part of a rank="memory" score: ``value`` (0-1) times ``weight`` adds ``points``.
    ``basis``: what the value was computed from (relevance: the mode's score; recency: the
    memory's age in days; frequency: how often search has returned it; importance: its
    metadata importance, null when it has none and 0.5 is assumed)."""

    value: float
    weight: float
    points: float
    basis: float | None = None


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
