"""compose.yaml read as Docker Compose reads it, for tests that run its services as processes
(no Docker engine here): ``${NAME:-default}`` and ``${NAME:?error}`` filled in."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "compose.yaml"
VARIABLE = re.compile(r"\$\{(\w+)(:-|:\?)?([^}]*)\}")


def services() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def interpolate(value: str, values: dict[str, str]) -> str:
    """``value`` with each variable from ``values``; one compose requires (``:?``) must be
    given, one with a default (``:-``) takes it when not."""
    def resolve(match: re.Match) -> str:
        name, kind, default = match.group(1), match.group(2), match.group(3)
        if name in values:
            return values[name]
        assert kind == ":-", f"compose.yaml needs {name}; the test must give it"
        return default

    return VARIABLE.sub(resolve, value)
