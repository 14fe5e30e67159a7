"""The ``zapomni ingest``, ``export``, ``import``, ``reembed`` and ``migrate`` commands:
argparse registration and one clear line on stderr for anything that goes wrong.

Every command reaches the stack the same way: each part it talks to has one flag, the same
in every command, whose default is the environment variable the stack's processes read, and
those default to what ``zapomni up`` serves. So with ``zapomni up`` no flag is needed; for a
remote stack, one flag (or variable) per part: ``--mcp-url`` and ``--token`` for the MCP
front (ingest, reembed), ``--redis-url`` for the queue (import), ``--falkordb-url`` for the
store (export, migrate)."""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import redis.exceptions

from zapomni.services.cli.export import export_namespace, open_output
from zapomni.services.cli.ingest import run as ingest_files
from zapomni.services.cli.reembed import reembed_namespace
from zapomni.services.cli.restore import import_file
from zapomni.shared.protocol.base import NAMESPACE_PATTERN
from zapomni.shared.protocol.errors import ZapomniError
from zapomni.shared.settings import Settings, without_password
from zapomni.shared.store.graphstore import GraphStore
from zapomni.shared.store.migrate import SCHEMA_VERSION, migrate_store

NAMES = {"redis": "Redis (its queue)", "falkordb": "FalkorDB (its store)"}


def front_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mcp-url", default="", help="the MCP front (default: "
                        "http://ZAPOMNI_MCP_HOST:ZAPOMNI_MCP_PORT/mcp, zapomni up's)")
    parser.add_argument("--token", default="", help="the front's bearer token (default: "
                        "ZAPOMNI_MCP_TOKEN); a scoped one must cover the namespace and write")


def store_option(parser: argparse.ArgumentParser, part: str) -> None:
    """``--redis-url`` (the queue) or ``--falkordb-url`` (the store)."""
    parser.add_argument(f"--{part}-url", default="", help=f"the stack's {NAMES[part]} "
                        f"(default: ZAPOMNI_{part.upper()}_URL, zapomni up's)")


def stack_settings(args: argparse.Namespace) -> Settings:
    """The settings with the command's flags for where the stack is."""
    given = {k: getattr(args, k, "") for k in ("redis_url", "falkordb_url")}
    return Settings.from_env(**{k: v for k, v in given.items() if v})


def front_url(settings: Settings, given: str) -> str:
    return given or f"http://{settings.mcp_host}:{settings.mcp_port}/mcp"


def add_ingest(sub: argparse._SubParsersAction) -> None:
    ingest = sub.add_parser("ingest", help="add files and folders through the MCP front")
    ingest.add_argument("paths", nargs="+", metavar="PATH", help="files or folders")
    ingest.add_argument("--namespace", default="default")
    ingest.add_argument("--include", action="append", default=[], metavar="GLOB",
                        help="only files matching (a name glob, or a path glob with /)")
    ingest.add_argument("--exclude", action="append", default=[], metavar="GLOB")
    ingest.add_argument("--prune", action="store_true",
                        help="delete the memories of files gone from under PATH")
    front_options(ingest)
    ingest.set_defaults(run=run_ingest)


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register the commands on ``zapomni``'s subparsers; each sets ``run``."""
    add_ingest(sub)
    export = sub.add_parser("export", help="write a namespace to a gzip JSON-lines file")
    export.add_argument("--namespace", required=True)
    export.add_argument("--vectors", action="store_true",
                        help="include each chunk's vector (an import then embeds nothing)")
    export.add_argument("-o", "--output", default="-", help="file to write ('-': stdout)")
    store_option(export, "falkordb")
    export.set_defaults(run=run_export)
    load = sub.add_parser("import", help="restore an export file through the workers")
    load.add_argument("file")
    load.add_argument("--namespace", default=None,
                      help="the namespace to import into (default: the file's)")
    store_option(load, "redis")
    load.set_defaults(run=run_import)
    reembed = sub.add_parser("reembed", help="re-embed a namespace with the workers' model")
    reembed.add_argument("--namespace", required=True)
    reembed.add_argument("--no-wait", action="store_true", help="start the task and return")
    front_options(reembed)
    reembed.set_defaults(run=run_reembed)
    migrate = sub.add_parser("migrate", help="bring every namespace to the current stored "
                                             "shape (workers also do it at start-up)")
    store_option(migrate, "falkordb")
    migrate.set_defaults(run=run_migrate)


def check_namespace(name: str | None) -> None:
    if name is not None and not re.fullmatch(NAMESPACE_PATTERN, name):
        raise ZapomniError(f"--namespace: '{name}' is not a namespace name (1-64 of a-z, "
                           "0-9, _ and -, starting with a letter or digit)")


def guarded(work: Callable[[], Coroutine[Any, Any, int]], part: str = "redis",
            url: str = "") -> int:
    """Run the command; an error is one line. ``part``: the store it talks to ("redis" or
    "falkordb"), at ``url``."""
    flag = f"--{part}-url (or ZAPOMNI_{part.upper()}_URL)"
    try:
        return asyncio.run(work())
    except ZapomniError as exc:
        print(f"zapomni: {exc}", file=sys.stderr, flush=True)
        return 1
    except redis.exceptions.AuthenticationError:
        print(f"zapomni: the stack's {NAMES[part]} refused the password; pass the right one "
              f"in {flag} as redis://:PASSWORD@host:port", file=sys.stderr, flush=True)
        return 1
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
        print(f"zapomni: cannot reach the stack's {NAMES[part]} at {without_password(url)}; "
              f"start it with `zapomni up`, or pass {flag} where it runs",
              file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("zapomni: interrupted", file=sys.stderr, flush=True)
        return 130


def run_ingest(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    return ingest_files(args, front_url(settings, args.mcp_url),
                        args.token or settings.mcp_token, settings.ingest_max_file_bytes)


def run_export(args: argparse.Namespace) -> int:
    settings = stack_settings(args)

    async def work() -> int:
        check_namespace(args.namespace)
        out = open_output(args.output)
        started = time.perf_counter()
        try:
            header = await export_namespace(settings, args.namespace, out,
                                            vectors=args.vectors)
        except BaseException:
            if out is not sys.stdout.buffer:  # no half-written file left behind
                out.close()
                Path(args.output).unlink(missing_ok=True)
            raise
        if out is not sys.stdout.buffer:
            out.close()
        print(f"zapomni: exported {header.memories:,} memories of '{args.namespace}' "
              f"({header.model}, {header.dim}-d{', with vectors' if args.vectors else ''}) "
              f"in {time.perf_counter() - started:.2f} s", file=sys.stderr, flush=True)
        return 0
    return guarded(work, "falkordb", settings.falkordb_url)


def run_import(args: argparse.Namespace) -> int:
    settings = stack_settings(args)

    async def work() -> int:
        check_namespace(args.namespace)
        path = Path(args.file)
        if not path.is_file():
            raise ZapomniError(f"{args.file}: no such file")
        record = await import_file(settings, path, args.namespace)
        if record.state != "done":
            raise ZapomniError(f"the import task {record.task_id} ended {record.state}: "
                               f"{record.error or record.message}")
        print(f"zapomni: {record.message} (import task {record.task_id})", file=sys.stderr,
              flush=True)
        if record.graph_task_id:
            print(f"zapomni: follow the entities with graph_status"
                  f"({record.graph_task_id!r})", file=sys.stderr, flush=True)
        return 0
    return guarded(work, "redis", settings.redis_url)


def run_reembed(args: argparse.Namespace) -> int:
    async def work() -> int:
        check_namespace(args.namespace)
        settings = Settings.from_env()
        record = await reembed_namespace(settings, args.namespace,
                                         mcp_url=front_url(settings, args.mcp_url),
                                         wait=not args.no_wait, token=args.token)
        print(f"zapomni: reembed task {record['task_id']}: {record['state']}"
              f"{' - ' + record['message'] if record.get('message') else ''}",
              file=sys.stderr, flush=True)
        return 0 if record["state"] in ("done", "queued", "running") else 1
    return guarded(work)


def run_migrate(args: argparse.Namespace) -> int:
    settings = stack_settings(args)

    async def work() -> int:
        store = GraphStore(settings, max_connections=2)
        try:
            migrated = await migrate_store(store)
        finally:
            await store.aclose()
        for namespace, changed in migrated.items():
            print(f"zapomni: {namespace}: {changed:,} memories changed", file=sys.stderr)
        print(f"zapomni: every namespace is at stored shape version {SCHEMA_VERSION}",
              file=sys.stderr, flush=True)
        return 0
    return guarded(work, "falkordb", settings.falkordb_url)
