"""The curve's per-leg figures (tests/bench/curve_legs.py) from its samples: the stretches of
each run summed, never the time between a stop and a resume; a process restarted between two
samples counted from its start; "at the size" from the pairs that end in the last 10%."""

from __future__ import annotations

from tests.bench.curve_legs import figures, targets


def point(run: int, t: float, chunks: int, falkordb: dict, worker: dict) -> dict:
    return {"run": run, "t": t, "chunks": chunks, "falkordb": falkordb, "worker": worker}


def test_a_leg_sums_its_runs_stretches_and_reads_its_size_from_the_last_tenth():
    samples = [
        point(1, 100.0, 1000, {"7": 10.0}, {"8": 5.0, "9": 5.0}),
        point(1, 110.0, 2000, {"7": 12.0}, {"8": 6.0, "9": 6.0}),
        # stopped here for an hour; the second run's processes have new pids
        point(2, 3710.0, 2400, {"17": 0.5}, {"18": 0.2, "19": 0.2}),
        point(2, 3720.0, 3000, {"17": 2.5}, {"18": 0.7, "19": 0.8}),
        point(2, 3725.0, 3500, {"17": 4.0}, {"18": 1.2, "29": 0.3}),  # 19 restarted as 29
    ]
    state = {"legs": {"3500": {"samples": samples}}}

    leg = figures(state, 3500)

    assert leg["runs"] == 2
    assert leg["leg_chunks"] == 1000 + 600 + 500  # the 400 written around the stop: no pair
    assert leg["leg_seconds"] == 25.0
    assert leg["ingest_per_s"] == 84.0
    # FalkorDB 2.0 + 2.0 + 1.5 s; workers 2.0 + 1.1 + (0.5 + 0.3) s
    assert leg["falkordb_cpu_ms"] == round(5500 / 2100, 2)
    assert leg["worker_cpu_ms"] == round(3900 / 2100, 2)
    # the last 10% of 3,500: the pairs that end above 3,150
    assert leg["at_size"] == {"leg_chunks": 500, "leg_seconds": 5.0, "ingest_per_s": 100.0,
                              "falkordb_cpu_ms": 3.0, "worker_cpu_ms": 1.6}


def test_the_targets_compare_the_largest_leg_with_the_one_nearest_a_tenth_of_it():
    def row(size: int, cpu: float, stopped: bool = False) -> dict:
        return {"size": size, "chunks": size + 7, "stopped_early": stopped, "workers": 2,
                "ingest_per_s": 200.0, "hybrid": {"p95": 40.0},
                "at_size": {"ingest_per_s": 150.0, "falkordb_cpu_ms": cpu,
                            "worker_cpu_ms": 2.5}}

    rows = [row(10_000, 1.0), row(100_000, 2.0), row(1_000_000, 3.5),
            row(2_000_000, 9.0, stopped=True)]

    said = targets(rows)

    assert "at 1,000,007 chunks:" in said
    assert "hybrid p95 40.0 ms (<= 50)" in said
    assert "ingest 150.0 chunks/s at the size, 200.0 over the leg, 2 workers" in said
    assert "3.5 ms at the size, 1.75x that at 100,007 (<= 1.5x" in said
