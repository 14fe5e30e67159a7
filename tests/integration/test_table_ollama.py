"""The scale benchmarks' Ollama-API server (tests/support/table_ollama.py), spoken to by the
product's Ollama client: a table text gets its own vector, a run of table texts joined by
blank lines the normalised sum of theirs, anything else a vector close to a table one."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.servers import ThreadedServer
from tests.support.table_ollama import TableOllama
from zapomni.shared.embedding.embed_ollama import OllamaEmbedder
from zapomni.shared.protocol.errors import EmbeddingRejected

TEXTS = ["The harbour crane is inspected on Tuesdays.", "Invoices are due within 30 days.",
         "The night shift starts at ten.", "Crates are sealed at the gate."]


def table() -> np.ndarray:
    rows = np.random.default_rng(3).standard_normal((len(TEXTS), 8)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


async def test_the_client_gets_table_vectors_sums_and_near_neighbours():
    vectors = table()
    server = TableOllama(TEXTS, vectors, latency=0.01)
    with ThreadedServer(server.app) as http:
        embedder = OllamaEmbedder(http.url, "nomic-embed-text", batch=2)
        try:
            got = await embedder.embed([*TEXTS, f"{TEXTS[0]}\n\n{TEXTS[2]}", "not in the table"])
            again = await embedder.embed(["not in the table"])
        finally:
            await embedder.aclose()
    np.testing.assert_allclose(got[: len(TEXTS)], vectors, atol=1e-6)
    joined = vectors[0] + vectors[2]
    np.testing.assert_allclose(got[len(TEXTS)], joined / np.linalg.norm(joined), atol=1e-6)
    nearest = vectors @ got[-1]
    assert nearest.max() > 0.99  # a real vector, moved a little
    np.testing.assert_array_equal(got[-1], again[0])  # the same text, the same vector
    assert (server.exact, server.joined, server.perturbed) == (len(TEXTS), 1, 2)
    assert server.requests == 4  # 6 texts in batches of 2, then 1


async def test_a_model_it_does_not_serve_is_refused_as_ollama_does():
    server = TableOllama(TEXTS, table(), model="nomic-embed-text")
    with ThreadedServer(server.app) as http:
        embedder = OllamaEmbedder(http.url, "all-minilm")
        try:
            with pytest.raises(EmbeddingRejected, match="ollama pull all-minilm"):
                await embedder.embed(["anything"])
        finally:
            await embedder.aclose()
