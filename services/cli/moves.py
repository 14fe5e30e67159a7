"""The ``zapomni export``, ``zapomni import``, ``zapomni reembed`` and ``zapomni migrate``
commands: argparse registration and one clear line on stderr for anything that goes wrong."""

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
from zapomni.services.cli.reembed import reembed_namespace
from zapomni.services.cli.restore import import_file
from zapomni.shared.errors import ZapomniError
from zapomni.shared.graphstore import GraphStore
from zapomni.shared.migrate import SCHEMA_VERSION, migrate_store
from zapomni.shared.protocol.base import NAMESPACE_PATTERN
from zapomni.shared.settings import Settings, without_password


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register the commands on ``zapomni``'s subparsers; each sets ``run``."""
    export = sub.add_parser("export", help="write a namespace to a gzip JSON-lines file")
    export.add_argument("--namespace", required=True)
    export.add_argument("--vectors", action="store_true",
                        help="include each chunk's vector (an import then embeds nothing)")
    export.add_argument("-o", "--output", default="-", help="file to write ('-': stdout)")
    export.set_defaults(run=run_export)
    load = sub.add_parser("import", help="restore an export file through the workers")
    load.add_argument("file")
    load.add_argument("--namespace", default=None,
                      help="the namespace to import into (default: the file's)")
    load.set_defaults(run=run_import)
    reembed = sub.add_parser("reembed", help="re-embed a namespace with the workers' model")
    reembed.add_argument("--namespace", required=True)
    reembed.add_argument("--mcp-url", default="",
                         help="the front (default: http://ZAPOMNI_MCP_HOST:ZAPOMNI_MCP_PORT/mcp)")
    reembed.add_argument("--no-wait", action="store_true", help="start the task and return")
    reembed.add_argument("--token", default="",
                         help="bearer token for the front (default: ZAPOMNI_MCP_TOKEN); a "
                              "scoped one must cover the namespace and write")
    reembed.set_defaults(run=run_reembed)
    migrate = sub.add_parser("migrate", help="bring every namespace to the current stored "
                                             "shape (workers also do it at start-up)")
    migrate.set_defaults(run=run_migrate)


def check_namespace(name: str | None) -> None:
    if name is not None and not re.fullmatch(NAMESPACE_PATTERN, name):
        raise ZapomniError(f"--namespace: '{name}' is not a namespace name (1-64 of a-z, "
                           "0-9, _ and -, starting with a letter or digit)")


def guarded(work: Callable[[], Coroutine[Any, Any, int]]) -> int:
    try:
        return asyncio.run(work())
    except ZapomniError as exc:
        print(f"zapomni: {exc}", file=sys.stderr, flush=True)
        return 1
    except redis.exceptions.AuthenticationError:
        print("zapomni: the stack's Redis/FalkorDB refused the password; put the right one in "
              "ZAPOMNI_REDIS_URL and ZAPOMNI_FALKORDB_URL (redis://:PASSWORD@host:port)",
              file=sys.stderr, flush=True)
        return 1
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
        settings = Settings.from_env()
        print(f"zapomni: cannot reach the stack's Redis/FalkorDB "
              f"({without_password(settings.redis_url)}, "
              f"{without_password(settings.falkordb_url)}); start it with `zapomni up`, or set "
              "ZAPOMNI_REDIS_URL and ZAPOMNI_FALKORDB_URL to where it runs",
              file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print("zapomni: interrupted", file=sys.stderr, flush=True)
        return 130


def run_export(args: argparse.Namespace) -> int:
    async def work() -> int:
        check_namespace(args.namespace)
        out = open_output(args.output)
        started = time.perf_counter()
        try:
            header = await export_namespace(Settings.from_env(), args.namespace, out,
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
    return guarded(work)


def run_import(args: argparse.Namespace) -> int:
    async def work() -> int:
        check_namespace(args.namespace)
        path = Path(args.file)
        if not path.is_file():
            raise ZapomniError(f"{args.file}: no such file")
        record = await import_file(Settings.from_env(), path, args.namespace)
        if record.state != "done":
            raise ZapomniError(f"the import task {record.task_id} ended {record.state}: "
                               f"{record.error or record.message}")
        print(f"zapomni: {record.message} (import task {record.task_id})", file=sys.stderr,
              flush=True)
        if record.graph_task_id:
            print(f"zapomni: follow the entities with graph_status"
                  f"({record.graph_task_id!r})", file=sys.stderr, flush=True)
        return 0
    return guarded(work)


def run_reembed(args: argparse.Namespace) -> int:
    async def work() -> int:
        check_namespace(args.namespace)
        record = await reembed_namespace(Settings.from_env(), args.namespace,
                                         mcp_url=args.mcp_url, wait=not args.no_wait,
                                         token=args.token)
        print(f"zapomni: reembed task {record['task_id']}: {record['state']}"
              f"{' - ' + record['message'] if record.get('message') else ''}",
              file=sys.stderr, flush=True)
        return 0 if record["state"] in ("done", "queued", "running") else 1
    return guarded(work)


def run_migrate(args: argparse.Namespace) -> int:
    async def work() -> int:
        store = GraphStore(Settings.from_env(), max_connections=2)
        try:
            migrated = await migrate_store(store)
        finally:
            await store.aclose()
        for namespace, changed in migrated.items():
            print(f"zapomni: {namespace}: {changed:,} memories changed", file=sys.stderr)
        print(f"zapomni: every namespace is at stored shape version {SCHEMA_VERSION}",
              file=sys.stderr, flush=True)
        return 0
    return guarded(work)
