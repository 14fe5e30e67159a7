"""What the built distributions hold (.ci/package runs it on `python -m build`'s output):

- the wheel installs ``zapomni/`` alone at the top of site-packages (plus its dist-info), with
  every module of shared/, services/ and workers/, and the vendored tokenizer and its NOTICE
  (shared/embedding/models);
- the sdist holds the sources the wheel is built from, the tokenizer and the licence, and no
  tests, caches or build outputs.

    python tests/smoke/check_dist.py DIST_DIR
"""

from __future__ import annotations

import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("shared", "services", "workers")


def expected_modules() -> set[str]:
    """zapomni/<folder>/... for every .py file of the checkout's code folders."""
    return {"zapomni/" + path.relative_to(ROOT).as_posix()
            for top in FOLDERS for path in (ROOT / top).rglob("*.py")}


def model_files() -> set[str]:
    """The vendored tokenizer and its NOTICE."""
    folder = ROOT / "shared" / "embedding" / "models"
    return {path.relative_to(ROOT).as_posix() for path in folder.rglob("*") if path.is_file()}


def check_wheel(wheel: Path) -> list[str]:
    names = set(zipfile.ZipFile(wheel).namelist())
    problems = []
    top = {name.split("/", 1)[0] for name in names}
    extra = {name for name in top if name != "zapomni" and not name.endswith(".dist-info")}
    if extra:
        problems.append(f"wheel: top-level names other than zapomni/: {sorted(extra)}")
    if missing := expected_modules() - names:
        problems.append(f"wheel: modules missing: {sorted(missing)[:10]}")
    if missing := {f"zapomni/{name}" for name in model_files()} - names:
        problems.append(f"wheel: model files missing: {sorted(missing)}")
    if not any(name.endswith(".dist-info/licenses/LICENSE") for name in names):
        problems.append("wheel: no LICENSE in its dist-info")
    if cached := [name for name in names if "__pycache__" in name or name.endswith(".pyc")]:
        problems.append(f"wheel: compiled caches inside: {cached[:5]}")
    return problems


def check_sdist(sdist: Path) -> list[str]:
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    problems = []
    wanted = {"pyproject.toml", "README.md", "LICENSE", *model_files(),
              *(name.removeprefix("zapomni/") for name in expected_modules())}
    if missing := wanted - names:
        problems.append(f"sdist: files missing: {sorted(missing)[:10]}")
    if stray := [n for n in names if n.startswith(("tests/", ".venv/")) or "__pycache__" in n]:
        problems.append(f"sdist: files that do not belong: {stray[:5]}")
    return problems


def main(dist: Path) -> None:
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise SystemExit(f"check_dist: expected one wheel and one sdist in {dist}; found "
                         f"{[p.name for p in dist.iterdir()]}")
    problems = check_wheel(wheels[0]) + check_sdist(sdists[0])
    if problems:
        raise SystemExit("check_dist: FAILED\n  " + "\n  ".join(problems))
    print(f"check_dist: {wheels[0].name} holds zapomni/ alone (and its dist-info) with the "
          f"tokenizer; {sdists[0].name} holds the sources, the tokenizer and the licence")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
