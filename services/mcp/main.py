"""``zapomni-mcp``: the MCP front, over streamable HTTP (default) or stdio."""

from __future__ import annotations

import argparse

import uvicorn

from zapomni.services.mcp.http import http_app
from zapomni.services.mcp.server import build_server
from zapomni.shared.logs import configure_logging
from zapomni.shared.settings import Settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="zapomni-mcp", description=__doc__)
    parser.add_argument("--stdio", action="store_true",
                        help="speak MCP on stdin/stdout (for Claude Desktop) instead of HTTP")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    configure_logging("mcp", settings.log_level)
    if args.stdio:
        build_server(settings, auth=False).run(transport="stdio", show_banner=False)
    else:
        uvicorn.run(http_app(settings), host=settings.mcp_host, port=settings.mcp_port,
                    log_level=settings.log_level.lower(), access_log=False, log_config=None,
                    ws="none")


if __name__ == "__main__":
    main()
