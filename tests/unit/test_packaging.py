"""One import root: the package list in pyproject.toml covers every folder of code, and no
module imports the folders by their bare names (they install as zapomni.shared, ...)."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("shared", "services", "workers")


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _package_of(folder: Path) -> str:
    return "zapomni." + ".".join(folder.relative_to(ROOT).parts)


def test_every_code_folder_is_a_listed_package():
    listed = set(_setuptools()["packages"])
    inits = [init for top in FOLDERS for init in (ROOT / top).rglob("__init__.py")]
    code = {_package_of(init.parent) for init in inits}
    assert code - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    # data only: the vendored tokenizer
    assert listed - code == {"zapomni.shared.embedding.models",
                             "zapomni.shared.embedding.models.minilm"}
    assert _setuptools()["package-dir"] == {f"zapomni.{top}": top for top in FOLDERS}


def _bare_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
        found += [f"{path.relative_to(ROOT)}: {name}" for name in names
                  if name.split(".")[0] in FOLDERS]
    return found


def test_nothing_imports_the_folders_by_their_bare_names():
    sources = [p for top in (*FOLDERS, "tests") for p in (ROOT / top).rglob("*.py")]
    assert len(sources) > 100
    assert [hit for path in sources for hit in _bare_imports(path)] == []


def _locked(name: str) -> dict[str, tuple[str, int]]:
    """A lock file's requirements: name -> (version, how many sha256 it lists)."""
    text = (ROOT / name).read_text()
    blocks = re.split(r"\n(?=[a-z0-9])", text.split("\n", 2)[2])
    found = {}
    for block in blocks:
        head = re.match(r"([a-z0-9][a-z0-9._-]*)==([^ ;\\\n]+)", block)
        assert head, f"{name}: not a pinned requirement: {block[:80]!r}"
        found[head[1]] = (head[2], block.count("--hash=sha256:"))
    return found


def _pins(requirements: list[str]) -> dict[str, str]:
    pairs = (r.split("==") for r in requirements if "==" in r)
    return {n.lower().replace("_", "-"): v for n, v in pairs}


def test_the_lock_files_pin_every_dependency_by_hash_at_pyprojects_versions():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime, test = _locked("requirements.lock"), _locked("requirements-test.lock")
    for lock in (runtime, test):
        assert all(hashes >= 1 for _, hashes in lock.values()), lock
    for name, version in _pins(project["dependencies"]).items():
        assert runtime.get(name, ("",))[0] == version, (name, version)
    for name, version in _pins(project["optional-dependencies"]["test"]).items():
        assert test.get(name, ("",))[0] == version, (name, version)
    # the project alone is held to the versions the suite runs with
    assert {n: v for n, (v, _) in runtime.items()} == \
        {n: test[n][0] for n in runtime}, "requirements.lock and requirements-test.lock differ"
    assert "setuptools" in runtime and "pip" in test  # the build backend; ./dev's own pip
    tools = _locked(".ci/package-tools.lock")
    wanted = [line for line in (ROOT / ".ci" / "package-tools.txt").read_text().splitlines()
              if line and not line.startswith("#")]
    for name, version in _pins(wanted).items():
        assert tools[name][0] == version and tools[name][1] >= 1, name
