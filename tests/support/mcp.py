"""Calling tools through fastmcp's client in tests: the answer's data, or its error text."""

from __future__ import annotations

from fastmcp import Client


async def call(client: Client, tool: str, **arguments):
    """The answer as JSON (structured content): fastmcp's `.data` would turn it into
    dataclasses built from the output schema, dropping fields the schema does not name."""
    return (await client.call_tool(tool, arguments)).structured_content


async def error(client: Client, tool: str, **arguments) -> str:
    result = await client.call_tool(tool, arguments, raise_on_error=False)
    assert result.is_error
    return result.content[0].text


async def answer(client: Client, tool: str, arguments: dict):
    """``call`` with the arguments as one dict."""
    return (await client.call_tool(tool, arguments)).structured_content
