"""Calling tools through fastmcp's client in tests: the answer's data, or its error text."""

from __future__ import annotations

from fastmcp import Client


async def call(client: Client, tool: str, **arguments):
    return (await client.call_tool(tool, arguments)).data


async def error(client: Client, tool: str, **arguments) -> str:
    result = await client.call_tool(tool, arguments, raise_on_error=False)
    assert result.is_error
    return result.content[0].text
