"""What every message shares: the id patterns and types, and the three kinds of struct
(strict at the edges, lenient for what is stored or answered, versioned jobs).

Every value that crosses a process or storage boundary is one msgspec Struct of this package:
tool arguments once decoded and the front's receipts (api), arq job payloads in msgpack (jobs),
task records in Redis (task_records), the query service's answers in JSON (answers) and the
records of an export file (export). Decode once at the edge; inside, trust the types. New
fields get defaults so that an older process still reads a newer message.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

NAMESPACE_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
MEMORY_ID_PATTERN = r"^mem_[0-9a-f]{32}$"
TASK_ID_PATTERN = r"^task_[0-9a-f]{32}$"

Namespace = Annotated[str, Meta(pattern=NAMESPACE_PATTERN)]
MemoryId = Annotated[str, Meta(pattern=MEMORY_ID_PATTERN)]
Tag = Annotated[str, Meta(min_length=1, max_length=128)]
DEFAULT_NAMESPACE = "default"

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


Scalar = str | int | float | bool
SearchMode = Literal["hybrid", "vector", "keyword", "graph"]
SearchRank = Literal["relevance", "memory"]
Glob = Annotated[str, Meta(min_length=1, max_length=256)]
ListOrder = Literal["newest", "oldest"]
Thread = Annotated[str, Meta(min_length=1, max_length=512)]  # metadata "thread", exactly
