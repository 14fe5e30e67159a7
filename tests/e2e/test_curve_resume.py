"""The curve (`./dev bench curve`, tests/bench/curve.py) stopped in the middle of a leg and
resumed: the legs measured before the stop are kept as they were, the stopped leg continues
from the chunks the store holds and is measured once, with the stretches of both runs.

The benchmark's own table (real MiniLM vectors of 3,000 passages) lives outside the
repository; here the table is 50 SciFact abstracts (tests/data/scifact/README.md) with fixed
random unit vectors, which is all the store and the legs need."""

from __future__ import annotations

import argparse
import asyncio
import json

import numpy as np
import pytest

from tests.bench import curve, curve_legs
from tests.e2e.test_stack import load_passages
from tests.support.table_ollama import TableOllama
from tests.support.waiting import eventually

SIZES = [40, 160]


def options(data_dir, *, resume: bool) -> argparse.Namespace:
    return argparse.Namespace(sizes=SIZES, workers=1, queries=5, passages=[3, 5], window=2,
                              real=50, deadline="", preload=0.0, data_dir=data_dir,
                              resume=resume)


def table() -> tuple[TableOllama, list[str], list[str], np.ndarray]:
    docs = load_passages(50)
    passages = [d["text"] for d in docs]
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((len(passages), 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    asked = [d["text"].split("\n\n")[0] for d in docs[:5]]  # the titles as questions
    queries = vectors[:5]
    # a little latency per embedding call: the second leg takes long enough to stop inside
    server = TableOllama(passages + asked, np.vstack([vectors, queries]), latency=0.5)
    return server, passages, asked, queries


def state_of(data_dir) -> dict:
    return json.loads((data_dir / curve_legs.STATE).read_text())


@pytest.mark.timeout(600)
async def test_a_curve_stopped_inside_a_leg_resumes_it_and_keeps_the_leg_before(
        tmp_path, monkeypatch):
    monkeypatch.setattr(curve_legs, "SAMPLE_S", 0.5)
    monkeypatch.setattr(curve, "RESULTS", tmp_path / "results")
    data_dir = tmp_path / "curve"
    server, passages, asked, queries = table()
    first = options(data_dir, resume=False)
    run = asyncio.create_task(curve.curve(first, curve_legs.open_state(data_dir, first), server,
                                          passages, asked, queries))

    def inside_second_leg(state: dict) -> bool:
        if run.done():  # it ended before: say how
            run.result()
            raise AssertionError("the first run ended before it was stopped")
        samples = state["legs"].get(str(SIZES[1]), {}).get("samples", [])
        return len(samples) > 1 and samples[0]["chunks"] < samples[-1]["chunks"] < SIZES[1]

    async def saved() -> dict:
        return state_of(data_dir) if (data_dir / curve_legs.STATE).exists() else {"legs": {}}

    await eventually(saved, inside_second_leg, "a sample inside the second leg",
                              timeout=300, every=0.2)
    run.cancel()  # what Ctrl-C or SIGTERM does to the bench's main task
    with pytest.raises(asyncio.CancelledError):
        await run
    stopped = state_of(data_dir)
    assert [r["size"] for r in stopped["rows"]] == [SIZES[0]]
    assert curve_legs.measured(stopped, SIZES[1]) is None

    with pytest.raises(SystemExit, match="holds a previous run; --resume continues it"):
        curve_legs.open_state(data_dir, first)
    changed = options(data_dir, resume=True)
    changed.workers = 2
    with pytest.raises(SystemExit, match=r"measured with --workers 1 \(now 2\)"):
        curve_legs.open_state(data_dir, changed)

    again = options(data_dir, resume=True)
    rows = await curve.curve(again, curve_legs.open_state(data_dir, again), server, passages,
                             asked, queries)

    assert [r["size"] for r in rows] == SIZES
    assert rows[0] == stopped["rows"][0]  # kept as measured, not measured again
    last = rows[1]
    assert SIZES[1] <= last["chunks"] < SIZES[1] + 40  # a document or two past the size
    assert last["runs"] == 2  # its stretches from both runs
    resumed = state_of(data_dir)
    assert resumed["runs"] == 2 and resumed["rows"] == rows
    samples = resumed["legs"][str(SIZES[1])]["samples"]
    assert {s["run"] for s in samples} == {1, 2}
    assert [s["chunks"] for s in samples] == sorted(s["chunks"] for s in samples)
    # the rate counts the stretches of the runs, not the stop between them
    stretches = [b["t"] - a["t"] for a, b in zip(samples, samples[1:], strict=False)
                 if a["run"] == b["run"]]
    assert last["leg_seconds"] == pytest.approx(sum(stretches), abs=0.1)
    each = [max(s["chunks"] for s in samples if s["run"] == n) -
            min(s["chunks"] for s in samples if s["run"] == n) for n in (1, 2)]
    assert each[0] > 0 and each[1] > 0 and last["leg_chunks"] == sum(each)
    for row in rows:
        assert row["ingest_per_s"] > 0
        assert row["falkordb_cpu_ms"] > 0 and row["worker_cpu_ms"] > 0
        assert row["vector"]["p95"] > 0 and row["hybrid"]["p95"] > 0
        assert 0 < row["recall_at_10"] <= 1
        assert row["falkordb_rss_mb"] > 0
    summary = curve_legs.targets(rows)
    assert f"at {last['chunks']:,} chunks" in summary
    assert f"that at {rows[0]['chunks']:,}" in summary
