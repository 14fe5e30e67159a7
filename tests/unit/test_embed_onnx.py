import numpy as np
import pytest

from zapomni.shared.embedding.embed import make_embedder
from zapomni.shared.embedding.embed_onnx import DIMENSION, OnnxEmbedder
from zapomni.shared.settings import Settings


@pytest.fixture(scope="module")
def embedder() -> OnnxEmbedder:
    return OnnxEmbedder(threads=2, batch=4)


def test_vectors_are_unit_length_and_in_input_order(embedder):
    texts = ["a cat sat on the mat", "x", "the stock market fell sharply today " * 20,
             "a kitten rested on a rug", "quarterly earnings dropped"]
    vectors = embedder.embed_sync(texts)
    assert vectors.shape == (5, DIMENSION) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    one_by_one = np.vstack([embedder.embed_sync([t]) for t in texts])
    assert np.allclose(vectors, one_by_one, atol=1e-4)


def test_related_texts_are_closer_than_unrelated(embedder):
    q, related, unrelated = embedder.embed_sync([
        "How do I bake sourdough bread?",
        "Sourdough loaves need a starter, flour, water and a long proof before baking.",
        "The transmission of the car needs new fluid.",
    ])
    assert float(q @ related) > 0.5 > float(q @ unrelated)


async def test_async_embed_matches_sync(embedder):
    texts = ["one", "two"]
    assert np.allclose(await embedder.embed(texts), embedder.embed_sync(texts))


def test_a_workers_model_runs_on_one_thread_without_spinning_and_gives_the_same_vectors(
        embedder):
    """The cores of a host are shared by its workers: one thread a run, no busy-waiting
    pool (shared/embedding/embed_onnx.py, WORKER_THREADS); the vectors do not change."""
    worker = make_embedder(Settings.from_env(environ={}), worker=True)
    options = worker._session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    texts = ["a cat sat on the mat", "the stock market fell sharply today " * 20]
    assert np.allclose(worker.embed_sync(texts), embedder.embed_sync(texts), atol=1e-5)
