"""One import root: the package list in pyproject.toml covers every folder of code, and no
module imports the folders by their bare names (they install as zapomni.shared, ...)."""

from __future__ import annotations

import ast
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
    # data only: the name gate's weights and the vendored tokenizer
    assert listed - code == {"zapomni.shared.models", "zapomni.shared.models.minilm"}
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
