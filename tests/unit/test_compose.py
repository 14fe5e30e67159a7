"""compose.yaml is coherent with the code (no Docker engine here to run it)."""

import tomllib
from pathlib import Path

import yaml

from zapomni.shared.settings import ENV_PREFIX, Settings

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
