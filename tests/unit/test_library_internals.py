"""The private parts of arq, fastmcp/the MCP SDK and the FalkorDB client that Zapomni relies on
still look as it expects. Each wrapper lives in one module; a failure here names the upstream
shape that changed and that module, so a version bump breaks loudly here instead of silently
in leases, the request body limit or vector writes."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import redis.asyncio.client
import redis.exceptions
from arq.connections import ArqRedis
from arq.constants import job_key_prefix, result_key_prefix
from arq.jobs import deserialize_job, serialize_job
from arq.worker import Worker, func
from falkordb.asyncio import FalkorDB
from falkordb.asyncio.graph import AsyncGraph
from falkordb.helpers import stringify_param_value
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import RequestBodyLimitMiddleware

from zapomni.services.mcp.fastmcp_internals import body_limiter, mcp_endpoint
from zapomni.services.mcp.http import MAX_REQUEST_BYTES, http_app
from zapomni.services.mcp.server import build_server
from zapomni.shared.embedding.embed import to_params
from zapomni.shared.settings import Settings
from zapomni.shared.store.falkordb_internals import ListLiteral, falkordb_on, read_cells
from zapomni.shared.store.graphstore import refuses_writes
from zapomni.shared.tasks.arq_internals import queued_job
from zapomni.shared.tasks.capacity import JOB_KEY_PREFIX
from zapomni.shared.tasks.queue import deserialize, serialize
from zapomni.workers.arq_internals import ZapomniWorker, lease_key, set_claim_seconds

ARQ = "arq's Worker changed: see workers/arq_internals.py"
ARQ_ENQUEUE = "arq's enqueue_job changed: see shared/tasks/arq_internals.py"
MCP = "fastmcp / the MCP SDK changed: see services/mcp/fastmcp_internals.py"
FALKORDB = "the falkordb client changed: see shared/store/falkordb_internals.py"
REDIS = "redis-py's pipeline errors changed: see shared/store/graphstore.py, refuses_writes"


def params(method) -> list[str]:
    return list(inspect.signature(method).parameters)


def calls(method, text: str) -> bool:
    return text in inspect.getsource(method)


# ---- arq -----------------------------------------------------------------------------------


def test_arq_poll_iteration_is_the_overridable_step_of_the_main_loop():
    assert inspect.iscoroutinefunction(Worker._poll_iteration), ARQ
    assert params(Worker._poll_iteration) == ["self"], ARQ
    assert calls(Worker.main, "await self._poll_iteration()"), \
        f"{ARQ}: Worker.main no longer calls _poll_iteration, so our Redis-outage wait is dead"
    assert ZapomniWorker._poll_iteration is not Worker._poll_iteration


def test_arq_run_job_is_what_start_jobs_runs():
    assert inspect.iscoroutinefunction(Worker.run_job), ARQ
    assert params(Worker.run_job) == ["self", "job_id", "score"], ARQ
    assert calls(Worker.start_jobs, "self.run_job(job_id, int(score))"), \
        f"{ARQ}: start_jobs no longer runs jobs through run_job (leases would not be released)"


def test_arq_start_jobs_takes_a_slot_before_it_watches_a_jobs_claim():
    # a poll cut short there gives the slot back (ZapomniWorker.start_jobs): arq takes it
    # with these two steps, before the WATCH, and gives it back only on its own paths
    source = inspect.getsource(Worker.start_jobs)
    taken = source.index("self.job_counter = self.job_counter + 1")
    assert source.index("await self.sem.acquire()") < taken < source.index(
        "await pipe.watch(in_progress_key)"), f"{ARQ}: start_jobs takes its slot otherwise"
    assert calls(Worker._release_sem_dec_counter_on_complete, "self.sem.release()"), ARQ


def test_arq_tasks_is_the_table_of_runs_start_jobs_fills():
    # a job not started twice puts its run under way back in this table (arq_internals.py)
    assert calls(Worker.start_jobs, "self.tasks[job_id] = t"), \
        f"{ARQ}: start_jobs no longer keeps each job's run in self.tasks"
    assert calls(Worker._poll_iteration, "for job_id, t in list(self.tasks.items()):"), \
        f"{ARQ}: the poll no longer reaps finished runs from self.tasks"


def test_arq_claim_lifetime_is_the_attribute_start_jobs_reads():
    assert calls(Worker.__init__, "self.in_progress_timeout_s ="), ARQ
    assert calls(Worker.start_jobs, "int(self.in_progress_timeout_s * 1000)"), \
        f"{ARQ}: the in-progress claim no longer lives in_progress_timeout_s"


def test_arq_claim_is_the_key_our_leases_renew():
    # workers/arq_internals.py renews arq's claim (SET ... XX) as a lease under this key
    assert calls(Worker.start_jobs, "in_progress_key = in_progress_key_prefix + job_id"), \
        f"{ARQ}: arq claims a running job under another key"
    assert lease_key("j") == "arq:in-progress:j", f"{ARQ}: arq's in-progress prefix changed"


async def noop(ctx: dict) -> None:
    return None


async def test_arq_worker_has_what_our_wrappers_touch():
    worker = ZapomniWorker(functions=[func(noop, name="noop")], queue_name="q", burst=True,
                           handle_signals=False)  # no Redis: nothing here connects
    try:
        set_claim_seconds(worker, 7)
        assert worker.in_progress_timeout_s == 7
        assert isinstance(worker.ctx, dict), f"{ARQ}: run_job's finally reads worker.ctx"
        # workers/main.py (stop_surely) and tests/support/workers.py (run_workers) set these
        for name in ("main_task", "allow_pick_jobs", "loop", "max_burst_jobs"):
            assert hasattr(worker, name), f"{ARQ}: Worker.{name} is gone"
        assert params(worker.handle_sig) == ["signum"], ARQ
    finally:
        await worker.close()


def test_arq_enqueue_writes_what_our_scripts_write():
    # shared/tasks/arq_internals.py enqueues in a Redis script, as ArqRedis.enqueue_job does
    for line in ("job_key = job_key_prefix + job_id",
                 "await pipe.exists(job_key, result_key_prefix + job_id)",
                 "serialize_job(function, args, kwargs, _job_try, enqueue_time_ms, "
                 "serializer=self.job_serializer)",
                 "pipe.psetex(job_key, expires_ms, job)",
                 "pipe.zadd(_queue_name, {job_id: score})"):
        assert calls(ArqRedis.enqueue_job, line), f"{ARQ_ENQUEUE}: {line!r} is gone"
    assert params(serialize_job) == ["function_name", "args", "kwargs", "job_try",
                                     "enqueue_time_ms", "serializer"], ARQ_ENQUEUE
    assert (job_key_prefix, result_key_prefix) == ("arq:job:", "arq:result:"), ARQ_ENQUEUE


def test_a_job_our_script_writes_is_one_arq_reads():
    queued = queued_job("q", "ingest_batch", {"batch_id": "b"}, "b", serializer=serialize,
                        expires_s=60, size=17, first=True)
    job = deserialize_job(queued.job, deserializer=deserialize)
    assert (job.function, list(job.args), job.kwargs, job.job_try) == \
        ("ingest_batch", [{"batch_id": "b"}], {}, None), ARQ_ENQUEUE
    assert abs(job.enqueue_time.timestamp() * 1000 - queued.score_ms) < 1, ARQ_ENQUEUE
    assert queued.args() == ["q", "b", queued.job, 60_000, queued.score_ms, "1"]


# ---- fastmcp and the MCP SDK ---------------------------------------------------------------


async def test_mcp_body_limit_lives_where_we_raise_it():
    plain = build_server(Settings.from_env(environ={})).http_app()
    async with plain.router.lifespan_context(plain):
        # the SDK's own default sits there: this is the limit the SDK enforces
        assert body_limiter(mcp_endpoint(plain)).max_body_size == 4 * 2**20, MCP
    for token in ("", "s3cret-s3cret"):  # with a token, fastmcp wraps the endpoint
        app = http_app(Settings.from_env(environ={}, mcp_token=token))
        async with app.router.lifespan_context(app):
            assert body_limiter(mcp_endpoint(app)).max_body_size == MAX_REQUEST_BYTES, MCP


def test_mcp_session_manager_sends_requests_through_the_limiter():
    assert calls(StreamableHTTPSessionManager.handle_request, "self.asgi_app("), \
        f"{MCP}: requests no longer pass session_manager.asgi_app"


async def test_mcp_limiter_refuses_a_body_over_max_body_size():
    seen = []

    async def inner(scope, receive, send):
        seen.append(await receive())

    async def receive():
        return {"type": "http.request", "body": b"x" * 11, "more_body": False}

    async def send(message):
        sent.append(message)

    for limit, status in ((10, 413), (11, None)):
        sent: list[dict] = []
        scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": []}
        await RequestBodyLimitMiddleware(inner, max_body_size=limit)(scope, receive, send)
        assert [m.get("status") for m in sent if "status" in m] == ([status] if status else []), \
            f"{MCP}: RequestBodyLimitMiddleware no longer enforces max_body_size"
    assert [m["body"] for m in seen] == [b"x" * 11], MCP


# ---- the FalkorDB client -------------------------------------------------------------------


def test_falkordb_writes_str_of_an_unknown_type_as_raw_query_text():
    vector = ListLiteral("[0.25,-1.5]")
    assert stringify_param_value(vector) == "[0.25,-1.5]", FALKORDB
    assert stringify_param_value([vector, vector]) == "[[0.25,-1.5],[0.25,-1.5]]", FALKORDB


class Sent(Exception):
    """What the client would have sent to the server (raised instead of sending it)."""


class Recorder:
    flushdb = None

    async def execute_command(self, *command):
        raise Sent(command)


@pytest.mark.parametrize("read_only", [False, True])
async def test_falkordb_sends_our_vectors_as_cypher_list_text(read_only):
    graph = AsyncGraph(Recorder(), "g")
    vectors = to_params(np.array([[0.5, -0.125], [1.0, 0.0]], dtype=np.float32))
    send = graph.ro_query if read_only else graph.query
    with pytest.raises(Sent) as sent:
        await send("RETURN $v, $vs", {"v": vectors[0], "vs": vectors})
    command = sent.value.args[0]
    assert command[:2] == ("GRAPH.RO_QUERY" if read_only else "GRAPH.QUERY", "g"), FALKORDB
    assert command[2] == "CYPHER v=[0.5,-0.125] vs=[[0.5,-0.125],[1.0,0.0]] RETURN $v, $vs", \
        f"{FALKORDB}: query parameters are no longer sent as a CYPHER text header with str() " \
        "of an unknown type"


def test_falkordb_init_ends_with_the_attributes_falkordb_on_sets():
    source = inspect.getsource(FalkorDB.__init__)
    for attribute in ("self.connection", "self.flushdb", "self.execute_command"):
        assert attribute in source, f"{FALKORDB}: FalkorDB.__init__ no longer sets {attribute}"
    assert calls(FalkorDB.list_graphs, "self.connection.execute_command"), FALKORDB


async def test_falkordb_graphs_send_queries_through_the_clients_execute_command():
    recorder = Recorder()
    db = falkordb_on(recorder, recorder.execute_command)
    graph = db.select_graph("g")
    with pytest.raises(Sent) as sent:
        await graph.query("RETURN 1")
    assert sent.value.args[0][:2] == ("GRAPH.QUERY", "g"), \
        f"{FALKORDB}: a graph no longer sends its queries through FalkorDB.execute_command"


async def test_falkordb_read_cells_sends_what_ro_query_sends():
    graph = AsyncGraph(Recorder(), "g")
    params = {"ids": ["a", "b"], "n": 3}
    with pytest.raises(Sent) as theirs:
        await graph.ro_query("RETURN $ids, $n", params, timeout=500)
    with pytest.raises(Sent) as ours:
        await read_cells(graph, "RETURN $ids, $n", params, 500)
    assert list(ours.value.args[0]) == list(theirs.value.args[0]), \
        f"{FALKORDB}: ro_query's command (header, --compact, timeout) is not read_cells' any more"


def test_a_refused_write_is_told_from_redis_pys_words():
    """shared/store/graphstore.py's refuses_writes reads the server's words after redis-py's
    prefix for a pipeline's failed command (a full disk answered MISCONF to arq's pipelines
    in the faults campaign)."""
    source = inspect.getsource(redis.asyncio.client.Pipeline.annotate_exception)
    assert "of pipeline caused error: {exception.args}" in source, REDIS
    misconf = "MISCONF Errors writing to the AOF file: No space left on device"
    assert refuses_writes(redis.exceptions.ResponseError(misconf))
    assert refuses_writes(redis.exceptions.ResponseError(
        f"Command # 1 (SET k v) of pipeline caused error: {(misconf,)}"))
    assert refuses_writes(redis.exceptions.OutOfMemoryError("command not allowed"))
    assert not refuses_writes(redis.exceptions.ResponseError("ERR unknown command 'X'"))


def test_arq_job_key_is_the_prefix_capacity_writes_out():
    """shared/tasks/capacity.py spells arq's job key itself so the query service does not
    load arq; our release script reads that key."""
    assert job_key_prefix == JOB_KEY_PREFIX, ("arq's job key changed: see "
                                              "shared/tasks/capacity.py, JOB_KEY_PREFIX")
