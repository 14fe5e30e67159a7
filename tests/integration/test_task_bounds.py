"""Nothing the task registry keeps outlives the records it serves, with no get_stats call to
trim it (issue 33, defect 3): the count sets of each state and a thread's last turn.
./dev bench tasks shows Redis flat over 100,000 tasks."""

from __future__ import annotations

import time

from tests.support.waiting import eventually
from tests.support.workers import add_text
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.tasks import tasks


def record(task_id: str) -> TaskRecord:
    return TaskRecord(task_id=task_id, kind="graph", namespace="ns", created_at=time.time())


async def through(aredis, task_id: str, ttl: int) -> None:
    """A task's life: queued, running, done, its record kept ``ttl`` seconds."""
    await tasks.create_task(aredis, record(task_id), ttl)
    await tasks.move(aredis, task_id, "running", ttl=ttl)
    await tasks.move(aredis, task_id, "done", ttl=ttl)


async def test_count_sets_drop_tasks_whose_records_expired_and_expire_themselves(aredis):
    old, new = "task_" + "a" * 32, "task_" + "b" * 32
    await through(aredis, old, 1)
    await eventually(lambda: aredis.exists(tasks.task_key(old)), lambda n: n == 0,
                     "the first task's record to expire")
    await through(aredis, new, 60)
    for namespace in ("ns", "*"):
        done = tasks.state_key(namespace, "done")
        assert await aredis.zrange(done, 0, -1) == [new.encode()]
        assert 0 < await aredis.ttl(done) <= 60
        for passed in ("queued", "running"):  # left behind on the way: empty, gone
            assert not await aredis.exists(tasks.state_key(namespace, passed))


async def test_a_threads_last_turn_expires_with_the_records(settings, aredis):
    await add_text(settings, "First turn of the talk.", {"thread": "talk"})
    last = tasks.last_key("default", "talk")
    assert 0 < await aredis.ttl(last) <= tasks.TASK_TTL
