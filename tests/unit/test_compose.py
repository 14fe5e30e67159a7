"""compose.yaml is coherent with the code (no Docker engine here to run it)."""

import tomllib
from pathlib import Path

import yaml

from zapomni.shared.settings import ENV_PREFIX, Settings
from zapomni.workers.resources import WORKER_NICE

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "compose.yaml").read_text())
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
SERVICES = COMPOSE["services"]
OURS = {"mcp", "query", "worker"}


def test_every_role_runs_a_console_script_of_this_package():
    assert {SERVICES[name]["command"][0] for name in OURS} == \
        {"zapomni-mcp", "zapomni-query", "zapomni-worker"}
    assert all(SERVICES[name]["command"][0] in SCRIPTS for name in OURS)
    assert all(SERVICES[name]["build"]["dockerfile"] == "deploy/Dockerfile" for name in OURS)
    assert (ROOT / "deploy" / "Dockerfile").exists()


def test_workers_scale():
    worker = SERVICES["worker"]
    assert "container_name" not in worker and "ports" not in worker


def test_workers_weigh_on_the_cpu_as_their_nice_does_under_zapomni_up():
    # the kernel's CPU weight of a nice value: 1024 at 0, 1.25 times less a step
    assert SERVICES["worker"]["cpu_shares"] == round(1024 / 1.25 ** WORKER_NICE)


def test_dependencies_wait_for_health():
    for name, service in SERVICES.items():
        for target, rule in service.get("depends_on", {}).items():
            if rule["condition"] == "service_healthy":
                assert "healthcheck" in SERVICES[target], (name, target)
            else:
                assert rule["condition"] == "service_completed_successfully"
                assert SERVICES[target]["restart"] == "no"


def test_every_variable_is_a_setting():
    fields = set(Settings.__struct_fields__)
    for name in OURS:
        for key in SERVICES[name]["environment"]:
            assert key.startswith(ENV_PREFIX) and key[len(ENV_PREFIX):].lower() in fields, key
    assert SERVICES["mcp"]["environment"]["ZAPOMNI_MCP_TOKEN"].startswith("${ZAPOMNI_MCP_TOKEN:?")


def test_falkordb_volume_holds_its_data_directory():
    # the image's entrypoint runs redis-server with --dir "$FALKORDB_DATA_PATH", which is
    # /var/lib/falkordb/data; a volume on /data would hold nothing of it
    assert SERVICES["falkordb"]["volumes"] == ["falkordb-data:/var/lib/falkordb/data"]


def test_only_the_front_and_the_dashboards_publish_a_port_and_only_on_loopback():
    published = {name: service["ports"] for name, service in SERVICES.items()
                 if "ports" in service}
    assert set(published) == {"mcp", "prometheus", "grafana"}
    for ports in published.values():
        assert all(str(p).startswith("127.0.0.1:") for p in ports), ports


def test_redis_and_falkordb_ask_for_passwords_that_every_url_carries():
    redis_command = SERVICES["redis"]["command"]
    assert redis_command[redis_command.index("--requirepass") + 1].startswith(
        "${REDIS_PASSWORD:?")
    assert "--requirepass ${FALKORDB_PASSWORD:?" in \
        SERVICES["falkordb"]["environment"]["REDIS_ARGS"]
    for name in ("redis", "falkordb"):  # their healthchecks' redis-cli logs in
        assert SERVICES[name]["environment"]["REDISCLI_AUTH"].startswith("${")
    for name in OURS:
        env = SERVICES[name]["environment"]
        assert env["ZAPOMNI_REDIS_URL"].startswith("redis://:${REDIS_PASSWORD:?"), name
        assert env["ZAPOMNI_FALKORDB_URL"].startswith("redis://:${FALKORDB_PASSWORD:?"), name


def test_the_query_service_and_the_front_share_a_required_credential():
    for name in ("query", "mcp"):
        assert SERVICES[name]["environment"]["ZAPOMNI_QUERY_SECRET"].startswith(
            "${ZAPOMNI_QUERY_SECRET:?"), name
    assert "ZAPOMNI_QUERY_SECRET" not in SERVICES["worker"]["environment"]
