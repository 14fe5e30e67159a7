"""Every Prometheus metric Zapomni exports, defined once, under the role that updates it.
Names carry the ``zapomni_`` prefix and their unit. Each process registers all of them and
updates the ones its role touches; each serves ``/metrics`` (front and query on their HTTP
port, workers on a metrics port). The query service also exports the whole system's queue,
workers and tasks (one exporter, not every worker)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
SLOW = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

# ---- front ----
TOOL_CALLS = Counter("zapomni_tool_calls_total", "MCP tool calls by tool and outcome",
                     ["tool", "outcome"])
TOOL_SECONDS = Histogram("zapomni_tool_seconds", "MCP tool latency", ["tool"], buckets=FAST)
ENQUEUE_SECONDS = Histogram("zapomni_enqueue_seconds",
                            "Time to record a task and enqueue its job", buckets=FAST)
REFUSALS = Counter("zapomni_refusals_total",
                   "Writes refused (queue full, Redis down, policy); busy: any request past "
                   "the front's in-flight limit", ["reason"])

# ---- query ----
SEARCH_SECONDS = Histogram("zapomni_search_seconds", "Search latency in the query service",
                           ["mode"], buckets=FAST)
SEARCH_CANDIDATES = Histogram("zapomni_search_candidates", "Candidates per signal",
                              ["signal"], buckets=(0, 1, 5, 10, 25, 50, 100, 250, 500, 1000))
QUERY_CACHE = Counter("zapomni_query_embedding_cache_total",
                      "Query embeddings served from the Redis cache (hit) or computed (miss)",
                      ["result"])
# the whole system's, from the query service
QUEUE_DEPTH = Gauge("zapomni_queue_depth", "Jobs queued or running")
QUEUE_BYTES = Gauge("zapomni_queue_bytes", "Payload bytes of the jobs queued or running")
QUEUE_OLDEST = Gauge("zapomni_queue_oldest_age_seconds",
                     "Age of the oldest job that is due and waiting")
WORKERS_ALIVE = Gauge("zapomni_workers_alive", "Workers with a live heartbeat")
TASKS = Gauge("zapomni_tasks", "Tasks by state (kept for the task TTL)", ["state"])

# ---- worker ----
JOBS = Counter("zapomni_jobs_total", "Jobs by function and outcome", ["job", "outcome"])
JOB_SECONDS = Histogram("zapomni_job_seconds", "Job duration", ["job"], buckets=SLOW)
JOB_STALLS = Counter("zapomni_job_stalls_total",
                     "Jobs retried because they made no progress for their stall limit", ["job"])
STAGE_SECONDS = Histogram("zapomni_stage_seconds", "Time per pipeline stage", ["stage"],
                          buckets=SLOW)
CHUNKS_EMBEDDED = Counter("zapomni_chunks_embedded_total", "Chunks embedded and written")
EMBED_REQUEST_SECONDS = Histogram("zapomni_embed_request_seconds",
                                  "One embedding request (an Ollama call or an ONNX batch)",
                                  buckets=SLOW)
EMBED_IN_FLIGHT = Gauge("zapomni_embed_in_flight", "Embedding requests in flight")
EMBED_CACHE = Counter("zapomni_embed_cache_total",
                      "Chunk embeddings served from the Redis cache (hit) or computed (miss)",
                      ["result"])
CHUNKS_GRAPHED = Counter("zapomni_chunks_graphed_total",
                         "Chunks read for entities and written to the knowledge graph")
FALKORDB_WRITE_SECONDS = Histogram("zapomni_falkordb_write_seconds",
                                   "FalkorDB write query latency", ["op"], buckets=SLOW)

# ---- rank: access tracking (services/query/rank.py, workers/access.py) ----
ACCESS_EVENTS = Counter("zapomni_access_events_total",
                        "Search access events by outcome: recorded on the stream, failed "
                        "(Redis refused or unreachable), dropped (too many writes pending)",
                        ["outcome"])
ACCESS_FOLDED = Counter("zapomni_access_folded_total",
                        "Access events folded into memories' access counts by workers")

ALL = (TOOL_CALLS, TOOL_SECONDS, ENQUEUE_SECONDS, REFUSALS, SEARCH_SECONDS, SEARCH_CANDIDATES,
       QUERY_CACHE, QUEUE_DEPTH, QUEUE_BYTES, QUEUE_OLDEST, WORKERS_ALIVE, TASKS, JOBS,
       JOB_SECONDS, JOB_STALLS, STAGE_SECONDS, CHUNKS_EMBEDDED, EMBED_REQUEST_SECONDS,
       EMBED_IN_FLIGHT, EMBED_CACHE, FALKORDB_WRITE_SECONDS, CHUNKS_GRAPHED, ACCESS_EVENTS,
       ACCESS_FOLDED)
