"""What Zapomni does with arq's private parts on the enqueue side, in one place (arq is pinned
exactly in pyproject.toml; tests/unit/test_library_internals.py fails, naming this file, if an
upgrade changes any of these shapes). The worker side is workers/arq_internals.py.

A task and its job are one step: the Redis script that writes a task record (and claims its
memory: shared/tasks/adds.py, shared/tasks/takeover.py) enqueues the task's job itself, so
that no task is ever left queued without a job, whatever fails between two round trips. The
script writes what ``ArqRedis.enqueue_job`` writes (arq 0.28), and like it writes nothing
when the job's key or its result's key exists:

- ``arq:job:{id}``: ``serialize_job(function, (payload,), {}, None, enqueue ms)``, expiring
  (PSETEX);
- the job id in the queue's sorted set, scored by the time it may start (ms).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from arq.constants import job_key_prefix, result_key_prefix
from arq.jobs import serialize_job

# ARGV-free Lua: a job for a queue, at ``score`` (ms), or ahead of every job waiting when
# ``first``; false when arq holds a job or a result of this id already
ENQUEUE = f"""
local function arq_enqueue(queue, id, job, expires_ms, score, first)
  if redis.call('EXISTS', '{job_key_prefix}' .. id, '{result_key_prefix}' .. id) > 0 then
    return false
  end
  score = tonumber(score)
  if first == '1' then
    local oldest = redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES')
    if oldest[2] and tonumber(oldest[2]) < score then score = tonumber(oldest[2]) - 1 end
  end
  redis.call('SET', '{job_key_prefix}' .. id, job, 'PX', expires_ms)
  redis.call('ZADD', queue, score, id)
  return true
end
"""


@dataclass(frozen=True)
class QueuedJob:
    """A job as a script enqueues it: ``args()`` are its ARGV for ``arq_enqueue`` (queue, id,
    serialized job, expiry ms, score ms, first), ``size`` the payload bytes it reserves
    (shared/tasks/capacity.py)."""

    queue: str
    job_id: str
    job: bytes
    expires_ms: int
    score_ms: int
    size: int
    first: bool = False

    def args(self) -> list[Any]:
        return [self.queue, self.job_id, self.job, self.expires_ms, self.score_ms,
                "1" if self.first else ""]


def queued_job(queue: str, function: str, payload: Any, job_id: str, *, serializer,
               expires_s: float, size: int, first: bool = False) -> QueuedJob:
    """``payload`` as the job ``function(payload)`` that arq's enqueue_job would write now."""
    now_ms = int(time.time() * 1000)
    job = serialize_job(function, (payload,), {}, None, now_ms, serializer=serializer)
    return QueuedJob(queue, job_id, job, int(expires_s * 1000), now_ms, size, first)
