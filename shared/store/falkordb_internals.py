"""Everything Zapomni relies on in the FalkorDB client beyond its documented API, in one place
(falkordb is pinned exactly in pyproject.toml; tests/unit/test_library_internals.py fails,
naming this file, if an upgrade changes it).

The client sends query parameters as text: ``Graph._build_params_header`` writes a
``CYPHER name=value ...`` header in front of the query, each value rendered by
``falkordb.helpers.stringify_param_value``, which quotes strings, renders lists and dicts item
by item and writes ``str()`` of any other type. ``ListLiteral`` relies on that last rule to
hand the client a vector (or node ids) already rendered as Cypher list text.

``read_cells`` sends a read-only query as the client's ``ro_query`` does (the same header, the
same ``--compact`` reply) but reads the reply's cells itself: the client parses each cell in
an awaited call (~3 µs a cell), most of the time of an answer of 10,000 rows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from falkordb.asyncio import FalkorDB
from falkordb.asyncio.graph import AsyncGraph

_encode_json = msgspec.json.Encoder().encode


class ListLiteral:
    """A list of numbers (a vector, node ids) rendered once as Cypher list text: msgspec writes
    the same shortest round-trip digits in C (0.1 ms per 384-d vector) that the client writes
    number by number in Python (0.58 ms)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


def number_list(values: list[int] | list[float]) -> ListLiteral:
    """Numbers (a vector's, node ids) as one ListLiteral, in msgspec's shortest round-trip
    digits."""
    return ListLiteral(_encode_json(values).decode())


def falkordb_on(connection: Any, execute: Callable[..., Awaitable[Any]]) -> FalkorDB:
    """A FalkorDB client over a connection we built (a bounded RedisCluster). The client's
    ``__init__`` makes its own redis client, asks the server by a blocking INFO whether it is
    a cluster, and if so builds a RedisCluster without a connection limit or socket
    timeouts; ``from_url`` runs that ``__init__`` against localhost:6379 first. So this sets
    the three attributes ``__init__`` ends with: ``connection`` (what ``list_graphs`` and
    ours use), ``flushdb``, and ``execute_command``, which each graph copies at creation
    (``Graph.__init__``) and sends every query through."""
    db = FalkorDB.__new__(FalkorDB)
    db.connection = connection
    db.flushdb = connection.flushdb
    db.execute_command = execute
    return db


async def read_cells(graph: AsyncGraph, query: str, params: dict[str, Any] | None,
                     limit: int | None) -> list[list[Any]]:
    """A read-only query's rows of scalars (and arrays of them), as ``ro_query`` sends it
    (``limit``: its timeout in ms)."""
    command = ["GRAPH.RO_QUERY", graph.name,
               graph._build_params_header(params or {}) + query, "--compact"]
    if isinstance(limit, int):
        command += ["timeout", limit]
    reply = await graph.execute_command(*command)
    if len(reply) != 3:
        return []
    # null, string and integer cells are their value: no call for the most common cells
    return [[value if kind in _AS_IS else cell_value((kind, value)) for kind, value in row]
            for row in reply[1]]


_AS_IS = frozenset((1, 2, 3))  # the compact format's null, string and integer


def cell_value(cell: list[Any] | tuple[int, Any]) -> Any:
    """A compact-format cell ([type, value]) of a scalar or an array of scalars as Python."""
    kind, value = cell
    if kind == 5:  # double, sent as text
        return float(value)
    if kind == 4:  # boolean, sent as text
        return value == "true"
    if kind == 6:  # array
        return [cell_value(item) for item in value]
    return value  # null, string, integer
