"""The arq job payloads (msgpack): lenient and versioned, so that a worker reads a job a
newer front wrote."""

from __future__ import annotations

from zapomni.shared.protocol.base import Job, Lenient
from zapomni.shared.protocol.export import ExportedEntity, ExportedMemory, ExportedRelation


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
    """Ingest the memories the add path gathered under ``batch_id`` (shared/tasks/adds.py): small
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
    order: shared/text/files.py, walk_key) with the counts so far and ``walked``, the files the
    walk found before it, so a run of any slice again writes the same counts."""

    task_id: str
    namespace: str
    path: str
    include: list[str] = []
    exclude: list[str] = []
    counts: FileCounts = FileCounts()
    after: str = ""
    walked: int = 0


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


class ImportJob(Job, kw_only=True):
    """One batch of an import: memories as the file holds them (vectors reused when the
    file's model and dimension are the worker's, embedded again otherwise), or, once every
    memory is written, entities and the relationships between them (a file that carries
    the graph: ``graph``)."""

    task_id: str
    namespace: str
    part: int
    parts: int
    model: str
    dim: int
    memories: list[ExportedMemory]
    graph: bool = False
    entities: list[ExportedEntity] = []
    relations: list[ExportedRelation] = []


class ReembedJob(Job, kw_only=True):
    """A step of a reembed task: the chunks after ``after`` (in id order) that have no
    vector of the new model yet, a batch at a time, until the step's time share is used."""

    task_id: str
    namespace: str
    after: str = ""
    seq: int = 0  # which step this is (each step enqueues the next under a derived id)
