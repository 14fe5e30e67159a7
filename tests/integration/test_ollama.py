"""The Ollama client against a real HTTP server that speaks Ollama's /api/embed."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import make_settings
from tests.support.graph import stored
from tests.support.waiting import eventually
from tests.support.workers import add_text, run_workers
from zapomni.services.mcp import front as ops
from zapomni.shared.embedding.embed_ollama import OllamaEmbedder
from zapomni.shared.protocol.errors import EmbeddingRejected, EmbeddingUnavailable
from zapomni.shared.protocol.validation import decode_add_memory
from zapomni.shared.tasks import tasks
from zapomni.workers import resources


async def test_batches_run_32_at_a_time(fake_ollama):
    # the server holds requests until 32 are in flight at once (30 s at most), then answers
    # each after 0.2 s: a client that sent fewer at once leaves max_in_flight under 32, one
    # that sent more finds the later ones in flight beside the first wave
    fake_ollama.gather, fake_ollama.gather_timeout, fake_ollama.latency = 32, 30.0, 0.2
    embedder = OllamaEmbedder(fake_ollama.url, "nomic-embed-text", concurrency=32, batch=4)
    texts = [f"text {i}" for i in range(64 * 4)]  # 64 requests of 4 texts
    try:
        vectors = await embedder.embed(texts)
    finally:
        await embedder.aclose()
    assert vectors.shape == (256, 768)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert fake_ollama.gathered, "the client never had 32 requests in flight at once"
    assert fake_ollama.requests == 64 and fake_ollama.max_in_flight == 32
    again = OllamaEmbedder(fake_ollama.url, "nomic-embed-text")
    try:
        assert np.allclose((await again.embed(["text 7"]))[0], vectors[7], atol=1e-6)
    finally:
        await again.aclose()


async def test_retries_503_then_succeeds(fake_ollama):
    fake_ollama.fail_statuses = [503, 503]
    embedder = OllamaEmbedder(fake_ollama.url, "nomic-embed-text", retries=3)
    try:
        vectors = await embedder.embed(["hello"])
    finally:
        await embedder.aclose()
    assert vectors.shape == (1, 768) and fake_ollama.requests == 3


async def test_gives_up_after_retries_with_a_retryable_error(fake_ollama):
    fake_ollama.fail_statuses = [500] * 10
    embedder = OllamaEmbedder(fake_ollama.url, "nomic-embed-text", retries=2)
    try:
        with pytest.raises(EmbeddingUnavailable, match=r"HTTP 500\) after 3 attempts"):
            await embedder.embed(["hello"])
    finally:
        await embedder.aclose()
    assert fake_ollama.requests == 3


async def test_timeouts_and_refused_connections_are_retryable(fake_ollama):
    fake_ollama.hang = True
    embedder = OllamaEmbedder(fake_ollama.url, "nomic-embed-text", retries=1, timeout=0.3)
    try:
        with pytest.raises(EmbeddingUnavailable, match="timed out"):
            await embedder.embed(["hello"])
    finally:
        await embedder.aclose()
    closed = OllamaEmbedder("http://127.0.0.1:9", "nomic-embed-text", retries=1)
    try:
        with pytest.raises(EmbeddingUnavailable, match="cannot connect"):
            await closed.embed(["hello"])
    finally:
        await closed.aclose()


async def test_missing_model_says_to_pull_it(fake_ollama):
    embedder = OllamaEmbedder(fake_ollama.url, "mxbai-embed-large", retries=3)
    try:
        with pytest.raises(EmbeddingRejected) as info:
            await embedder.embed(["hello"])
    finally:
        await embedder.aclose()
    assert "run `ollama pull mxbai-embed-large`" in info.value.message
    assert fake_ollama.requests == 1  # a 4xx is not retried


@pytest.mark.parametrize("body", [b'{"model": "m"}', b'{"embeddings": [[0.1, 0.2]]}',
                                  b'{"embeddings": "no"}', b"not json"])
async def test_an_answer_without_one_vector_per_text_is_refused(fake_ollama, body):
    fake_ollama.body = body
    embedder = OllamaEmbedder(fake_ollama.url, "nomic-embed-text", batch=2)
    try:
        with pytest.raises(EmbeddingRejected) as info:
            await embedder.embed(["one", "two"])
    finally:
        await embedder.aclose()
    assert "is 'nomic-embed-text' an embedding model?" in info.value.message


async def test_ingest_waits_out_an_outage_and_says_why(falkordb_url, fake_ollama, aredis,
                                                        monkeypatch):
    """503s, then an Ollama that accepts requests and never answers, then one that works:
    the task waits, says why, stores nothing meanwhile, and finishes."""
    import asyncio

    settings = make_settings(falkordb_url, ollama_url=fake_ollama.url)
    # no retries inside a job and a 1 s request limit: the job's own tries ride the outage out
    monkeypatch.setattr(resources, "make_embedder", lambda s, **_: OllamaEmbedder(
        s.ollama_url, s.ollama_model, retries=0, timeout=1.0))
    fake_ollama.fail_statuses = [503]
    receipt = await add_text(settings, "outage note")
    runner = asyncio.ensure_future(run_workers(settings))

    async def message() -> str:
        return (await tasks.get_task(aredis, receipt.task_id)).message

    async def waiting_for(reason: str) -> str:
        return await eventually(message, lambda m: m.startswith("waiting: ") and reason in m,
                                f"the task to say it waits for {reason!r}", timeout=120)

    first = await waiting_for("HTTP 503")
    fake_ollama.hang = True
    await waiting_for("timed out")
    during = await stored(settings)
    fake_ollama.hang = False
    await runner
    assert first.startswith("waiting: the embedder (Ollama) is unavailable (HTTP 503)")
    assert fake_ollama.url.split("//")[1] not in first  # nor its address: in the log only
    assert (during["ready"], during["chunks"]) == (0, 0)  # nothing stored without vectors
    record = await tasks.get_task(aredis, receipt.task_id)
    assert (record.state, record.attempts) == ("done", 3)
    assert (await stored(settings))["ready"] == 1


async def test_a_refusal_says_what_to_do_and_leaves_the_answer_to_the_log(
        falkordb_url, fake_ollama, aredis, caplog):
    """A task's error is read by any caller of graph_status: it says what failed and what
    to do; Ollama's address and answer go to the worker's log (credentials left out)."""
    url = fake_ollama.url.replace("http://", "http://keeper:s3cret@")
    settings = make_settings(falkordb_url, ollama_url=url)
    fake_ollama.fail_statuses = [400]
    receipt = await add_text(settings, "a note Ollama refuses")
    await run_workers(settings)
    record = await tasks.get_task(aredis, receipt.task_id)
    assert record.state == "failed"
    assert record.error == (
        "the embedder (Ollama) refused the request (HTTP 400; its answer is in the worker's "
        "log); check that ZAPOMNI_OLLAMA_MODEL names an embedding model that Ollama serves "
        "and that the texts fit its context")
    address = fake_ollama.url.split("//")[1]
    logged = caplog.text
    assert "injected failure 400" in logged and address in logged and "s3cret" not in logged
    missing = make_settings(falkordb_url, ollama_url=url, ollama_model="mxbai-embed-large")
    receipt = await add_text(missing, "a note for a model Ollama lacks")
    await run_workers(missing)
    error = (await tasks.get_task(aredis, receipt.task_id)).error
    assert error == ("the embedder (Ollama) does not have the model 'mxbai-embed-large': run "
                     "`ollama pull mxbai-embed-large` where Ollama runs, or set "
                     "ZAPOMNI_OLLAMA_MODEL to a model it has")


async def test_model_mismatch_fails_the_task_and_stores_nothing(falkordb_url, fake_ollama,
                                                               aredis):
    from zapomni.services.mcp.front import Front

    onnx = make_settings(falkordb_url)
    ollama = make_settings(falkordb_url, ollama_url=fake_ollama.url)
    front = Front(onnx)
    try:
        await ops.add_memory(front, decode_add_memory("built with MiniLM", None, None))
        await run_workers(onnx)
        receipt = await ops.add_memory(front, decode_add_memory("embedded by Ollama", None,
                                                                None))
        await run_workers(ollama)
        record = await tasks.get_task(aredis, receipt.task_id)
        assert record.state == "failed"
        assert record.error.startswith(
            "namespace 'default' holds vectors of onnx:all-MiniLM-L6-v2-int8 (384-d) but this "
            "process embeds with ollama:nomic-embed-text (768-d)")
        assert (await stored(onnx))["memories"] == 1
        retry = await ops.add_memory(front, decode_add_memory("embedded by Ollama", None,
                                                              None))
        assert not retry.duplicate  # a failed ingest frees the text to be added again
    finally:
        await front.aclose()


async def test_chunk_vectors_are_cached_by_model_and_text(falkordb_url, fake_ollama, aredis):
    settings = make_settings(falkordb_url, ollama_url=fake_ollama.url, chunk_tokens=48)
    text = " ".join(f"Cached sentence {i} about lighthouses." for i in range(30))
    await add_text(settings, text, namespace="first")
    await run_workers(settings)
    first = fake_ollama.texts
    fake_ollama.reset_counts()
    await add_text(settings, text, namespace="second")
    await run_workers(settings)
    assert first > 10
    assert fake_ollama.texts == 1  # only the new worker's dimension probe
    assert (await stored(settings, "second"))["ready"] == 1
    assert len(await aredis.keys("zapomni:emb:ollama:nomic-embed-text:*")) == first - 1
