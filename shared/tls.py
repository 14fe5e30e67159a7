"""One TLS context per process for every httpx2 client. httpx2 builds a new one (loading the CA
bundle, about 0.1 s of CPU on the event loop) for each client it makes otherwise."""

from __future__ import annotations

import functools
import ssl

import httpx2


@functools.cache
def tls_context() -> ssl.SSLContext:
    return httpx2.create_ssl_context()
