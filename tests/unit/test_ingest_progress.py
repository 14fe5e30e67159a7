"""How far an ingest got: the share of a large text chunked (shared/text/large_text.py splits it
in sections to tell it), and an ingest task's rate and time left from its parts."""

from __future__ import annotations

import msgspec

from zapomni.services.mcp.task_status import shape_task
from zapomni.shared.protocol.task_records import TaskRecord
from zapomni.shared.text.chunking import Chunker
from zapomni.shared.text.large_text import exact_counts, sections, split_large

PARAGRAPHS = "\n\n".join(f"Entry {i}. The keeper noted fog at dawn and a clear night after."
                         for i in range(4000))


def test_sections_cover_the_text_and_end_at_paragraph_breaks():
    bounds = sections(PARAGRAPHS, 50_000)
    assert bounds[0][0] == 0 and bounds[-1][1] == len(PARAGRAPHS) and len(bounds) > 4
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    assert all(PARAGRAPHS[end - 2 : end] == "\n\n" for _, end in bounds[:-1])
    assert sections("one line without a break " * 10, 60)[-1][1] == 250
    assert sections("x" * 250, 100) == [(0, 100), (100, 200), (200, 250)]


def test_a_large_text_tells_how_far_it_got_and_keeps_the_contract():
    chunker = Chunker(chunk_tokens=64, overlap=8)
    shares: list[float] = []
    pieces, counts = split_large(PARAGRAPHS, chunker.tokenizer, chunker.capacity,
                                 chunker.overlap, chunker._splitter, shares.append)
    assert shares == sorted(shares) and shares[-1] == 1.0 and len(shares) == len(
        sections(PARAGRAPHS))
    assert all(PARAGRAPHS[s : s + len(p)] == p for s, p in pieces)
    assert counts == exact_counts(pieces, chunker.tokenizer)
    assert max(counts) <= chunker.capacity


def record(**fields) -> TaskRecord:
    base = dict(task_id="task_" + "0" * 32, kind="ingest", namespace="default",
                state="running", started_at=1000.0)
    return TaskRecord(**{**base, **fields})


def test_an_ingest_task_tells_its_rate_and_time_left_from_its_parts():
    running = shape_task(record(total=10, done=4, chunks=1000, parts_at=1010.0,
                                heartbeat_at=1030.0))
    assert (running.rate_chunks_per_s, running.eta_seconds) == (20.0, 30.0)
    done = shape_task(record(state="done", total=10, done=10, chunks=1000, parts_at=1010.0,
                             heartbeat_at=1030.0, finished_at=1060.0))
    assert (done.rate_chunks_per_s, done.eta_seconds) == (20.0, None)
    waiting = shape_task(record(total=10, done=0, chunks=1000, parts_at=1010.0,
                                heartbeat_at=1010.0))
    assert (waiting.rate_chunks_per_s, waiting.eta_seconds) == (0.0, None)
    one_part = shape_task(record(total=1, done=0))
    assert "eta_seconds" not in msgspec.to_builtins(one_part)
