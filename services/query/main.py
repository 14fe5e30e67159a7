"""``zapomni-query``: the read path as an HTTP JSON service."""

from __future__ import annotations

import argparse

import uvicorn

from zapomni.services.query.app import build_app
from zapomni.shared.embedding import checksums
from zapomni.shared.logs import configure_logging
from zapomni.shared.settings import Settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="zapomni-query", description=__doc__)
    parser.parse_args(argv)
    settings = Settings.from_env()
    settings.check_query_bind()
    try:  # the tokenizer (build_context) and the in-process model's weights
        checksums.minilm_path()
        checksums.tokenizer_path()
    except checksums.ModelMismatch as exc:
        raise SystemExit(f"zapomni-query: {exc}") from None
    configure_logging("query", settings.log_level)
    uvicorn.run(build_app(settings), host=settings.query_host, port=settings.query_port,
                log_config=None, access_log=False)


if __name__ == "__main__":
    main()
