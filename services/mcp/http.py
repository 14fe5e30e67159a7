"""The front's HTTP app: fastmcp's streamable HTTP app, with a request body limit that fits
the largest memory add_memory accepts.

The MCP SDK refuses request bodies over 4 MiB (413), and fastmcp 4.1.2 has no setting for
it, so a text of 4 to 10 million characters (inside add_memory's documented limit) could not
be sent over HTTP. services/mcp/fastmcp_internals.py raises it; tests/integration/test_fuzz.py
sends a 10,000,000-character text to prove it.
"""

from __future__ import annotations

from starlette.applications import Starlette

from zapomni.services.mcp.fastmcp_internals import set_max_body
from zapomni.services.mcp.server import build_server
from zapomni.shared.settings import Settings
from zapomni.shared.validation import MAX_TEXT_CHARS

# 4 bytes per character is the most UTF-8 needs; 1 MiB more for metadata and the envelope
MAX_REQUEST_BYTES = 4 * MAX_TEXT_CHARS + 2**20


def http_app(settings: Settings) -> Starlette:
    app = build_server(settings).http_app()
    set_max_body(app, MAX_REQUEST_BYTES)
    return app
