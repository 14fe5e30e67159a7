import msgspec
import pytest

from zapomni.shared.protocol.api import MemoryRef
from zapomni.shared.protocol.ids import chunk_id, memory_id, new_task_id
from zapomni.shared.protocol.jobs import ChunkSpan, IngestJob, PartJob
from zapomni.shared.settings import Settings
from zapomni.shared.tasks.queue import deserialize, serialize


def test_memory_id_depends_on_namespace_and_content_only():
    a = memory_id("default", "ab" * 32)
    assert a == memory_id("default", "ab" * 32)
    assert a != memory_id("other", "ab" * 32)
    assert a != memory_id("default", "cd" * 32)
    assert a.startswith("mem_") and len(a) == 36
    assert chunk_id(a, 7) == f"{a}:7"


def test_task_ids_are_unique():
    ids = {new_task_id() for _ in range(1000)}
    assert len(ids) == 1000 and all(i.startswith("task_") for i in ids)


def test_job_payload_round_trips_through_the_queue_serializer():
    job = PartJob(task_id="task_1", memory_id="mem_1", namespace="n", part=1, parts=3,
                  chunk_count=5, chunks=[ChunkSpan(idx=2, text="é", char_start=3, char_end=4,
                                                   tokens=1)])
    raw = serialize({"a": (job,), "k": {}, "f": "embed_part"})
    decoded = deserialize(raw)
    assert msgspec.convert(decoded["a"][0], PartJob) == job


def test_failed_job_results_serialize_their_exception_as_text():
    raw = serialize({"r": ValueError("boom"), "s": False})
    assert deserialize(raw)["r"] == "ValueError: boom"


def test_a_newer_job_with_fields_this_worker_does_not_know_still_decodes():
    """A rolling upgrade: a newer front's job reaches an older worker."""
    job = msgspec.convert({"task_id": "t", "memory_id": "m", "namespace": "n", "text": "x",
                           "content_hash": "h", "version": 2, "some_new_field": [1]},
                          IngestJob)
    assert (job.task_id, job.text, job.version) == ("t", "x", 2)


def test_tool_arguments_stay_strict():
    with pytest.raises(msgspec.ValidationError, match="unknown field `extra`"):
        msgspec.convert({"memory_id": "mem_" + "0" * 32, "extra": 1}, MemoryRef)


def test_settings_from_environment():
    s = Settings.from_env({"ZAPOMNI_MCP_PORT": "9000", "ZAPOMNI_REQUEST_TIMEOUT": "0.1",
                           "ZAPOMNI_NOT_A_SETTING": "x", "OTHER": "y"})
    assert s.mcp_port == 9000 and s.request_timeout == 0.1
    assert Settings.from_env(s.to_env()) == s
    with pytest.raises(SystemExit, match="ZAPOMNI_MCP_PORT: Expected `int`"):
        Settings.from_env({"ZAPOMNI_MCP_PORT": "eighty"})


@pytest.mark.parametrize(("host", "token", "allowed"), [
    ("127.0.0.1", "", True), ("localhost", "", True), ("::1", "", True),
    ("0.0.0.0", "", False), ("192.168.1.5", "", False), ("example.org", "", False),
    ("0.0.0.0", "s3cret-token", True),
])
def test_mcp_beyond_loopback_needs_a_token(host, token, allowed):
    settings = Settings(mcp_host=host, mcp_token=token)
    if allowed:
        settings.check_mcp_bind()
    else:
        with pytest.raises(SystemExit, match="without a token. Set ZAPOMNI_MCP_TOKEN"):
            settings.check_mcp_bind()
