"""Walking folders and extracting text (shared/text/files.py, shared/text/extract_text.py) on real
files: the vendored tree under tests/data/files and a PDF and DOCX made by the tests."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest

from tests.support.documents import W, make_docx, make_pdf, make_pdf_drawn_on
from zapomni.shared.text.files import Found, Loaded, Selection, Skipped, load_file, walk_files

TREE = Path(__file__).parent.parent / "data" / "files"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(TREE, root)
    (root / "docs" / "report.pdf").write_bytes(
        make_pdf(["The beacon uses a fresnel lens."], "Lens Report"))
    (root / "docs" / "log.docx").write_bytes(
        make_docx(["Keeper log: the kittiwake nests.", "Second entry."], "Keeper Log"))
    return root


def load_all(root: Path, selection: Selection | None = None) -> dict[str, Loaded | Skipped]:
    selection = selection or Selection()
    found = {}
    for item in walk_files(root, selection):
        found[item.source] = item if isinstance(item, Skipped) else \
            load_file(item, "the-root", selection.max_bytes)
    return found


def test_each_type_is_read_with_its_title_and_language(tree):
    loaded = load_all(tree)
    shape = {s: (f.metadata["type"], f.metadata.get("language"), f.metadata["title"])
             for s, f in loaded.items()}
    assert shape == {
        "README.md": ("markdown", None, "Lighthouse keeping notes"),
        "notes.txt": ("text", None, "notes.txt"),
        "docs/guide.rst": ("rst", None, "The Keeper's Guide"),
        "docs/page.html": ("html", None, "Fog Signal Schedule"),
        "docs/report.pdf": ("pdf", None, "Lens Report"),
        "docs/log.docx": ("docx", None, "Keeper Log"),
        "code/lamp.py": ("code", "python", "lamp.py"),
        "code/lamp.js": ("code", "javascript", "lamp.js"),
        "code/lamp.ts": ("code", "typescript", "lamp.ts"),
        "code/lamp.go": ("code", "go", "lamp.go"),
        "code/lamp.rs": ("code", "rust", "lamp.rs"),
        "code/Lamp.java": ("code", "java", "Lamp.java"),
    }
    words = {"README.md": "pelargonium", "notes.txt": "cormorant", "docs/guide.rst": "sextant",
             "docs/page.html": "marram", "docs/report.pdf": "fresnel",
             "docs/log.docx": "kittiwake", "code/lamp.py": "albatross",
             "code/lamp.js": "narwhal", "code/lamp.ts": "quokka", "code/lamp.go": "ocelot",
             "code/lamp.rs": "axolotl", "code/Lamp.java": "pangolin"}
    for source, word in words.items():
        assert word in loaded[source].text, source
    html = loaded["docs/page.html"].text
    assert "notshown" not in html and "color: red" not in html and "& breakwater" in html
    assert loaded["docs/log.docx"].text == "Keeper log: the kittiwake nests.\nSecond entry."
    meta = loaded["code/lamp.py"].metadata
    assert meta["source"] == "code/lamp.py" and meta["root"] == "the-root"
    assert len(meta["file_sha256"]) == 64


def test_a_file_root_is_its_own_name(tree):
    assert list(walk_files(tree / "docs" / "guide.rst", Selection())) == [
        Found(str(tree / "docs" / "guide.rst"), "guide.rst")]


def test_gitignore_files_nested_and_negated_and_git_and_caches_are_never_entered(tree):
    (tree / ".gitignore").write_text("# comment\n*.log\nbuild/\n/notes.txt\n")
    (tree / "build").mkdir()
    (tree / "build" / "out.md").write_text("built")
    (tree / "code" / "build.md").write_text("not the build folder")  # a file, not a folder
    (tree / "code" / "debug.log").write_text("ignored by the root's rule")
    (tree / "code" / ".gitignore").write_text("*.ts\n!keep.log\n")
    (tree / "code" / "keep.log").write_text("re-included")
    (tree / "docs" / "notes.txt").write_text("only /notes.txt at the root is ignored")
    (tree / ".git").mkdir()
    (tree / ".git" / "HEAD").write_text("ref: refs/heads/main")
    for cache in ("code/__pycache__", "node_modules/lamp", ".venv/lib"):
        (tree / cache).mkdir(parents=True)
        (tree / cache / "lamp.md").write_text("a tool's copy, never the user's text")
    sources = {item.source for item in walk_files(tree, Selection())}
    assert {"notes.txt", "build/out.md", "code/lamp.ts", "code/debug.log", ".git/HEAD",
            "code/__pycache__/lamp.md", "node_modules/lamp/lamp.md",
            ".venv/lib/lamp.md"}.isdisjoint(sources)
    assert {"code/build.md", "code/keep.log", "docs/notes.txt", ".gitignore",
            "code/.gitignore", "code/lamp.py"} <= sources


def test_include_and_exclude_globs(tree):
    only_code = Selection(include=("*.py", "*.go"))
    assert {i.source for i in walk_files(tree, only_code)} == {"code/lamp.py", "code/lamp.go"}
    no_docs = Selection(exclude=("docs", "*.java"))
    sources = {i.source for i in walk_files(tree, no_docs)}
    assert not any(s.startswith("docs/") for s in sources) and "code/Lamp.java" not in sources
    by_path = Selection(include=("code/*.[jt]s",))
    assert {i.source for i in walk_files(tree, by_path)} == {"code/lamp.js", "code/lamp.ts"}


def test_skipped_files_say_why_and_the_rest_are_read(tree):
    (tree / "blob.bin").write_bytes(b"\x00\x01\x02 not text")
    (tree / "big.txt").write_text("x" * 5000)
    (tree / "broken.pdf").write_bytes(b"%PDF-1.4 this is no PDF at all")
    (tree / "broken.docx").write_bytes(b"PK not a zip")
    (tree / "empty.md").write_text("  \n")
    (tree / "self.txt").symlink_to(tree / "self.txt")  # a link to itself: a loop
    (tree / "docs" / "again").symlink_to(tree)  # a folder link back up: a loop
    (tree / "gone.txt").symlink_to(tree / "nothing-here.txt")
    unreadable = tree / "secret.txt"
    if os.geteuid() == 0:  # permissions do not stop root: a file whose read fails
        unreadable.symlink_to("/proc/self/mem")
    else:
        unreadable.write_text("secret")
        unreadable.chmod(0)
    loaded = load_all(tree, Selection(max_bytes=4096))
    reasons = {s: f.reason for s, f in loaded.items() if isinstance(f, Skipped)}
    assert reasons.pop("blob.bin") == "binary (not text, PDF or DOCX)"
    assert reasons.pop("big.txt") == ("too big: 5,000 bytes, over the limit of 4,096 "
                                      "(ZAPOMNI_INGEST_MAX_FILE_BYTES)")
    assert reasons.pop("broken.pdf") == "a corrupt or unreadable PDF"
    assert reasons.pop("broken.docx") == "a corrupt DOCX (not a Word document's zip)"
    assert reasons.pop("empty.md") == "no text in it (empty)"
    assert reasons.pop("self.txt") == "a symbolic link loop"
    assert reasons.pop("docs/again") == ("a symbolic link loop (this folder was entered "
                                         "already)")
    assert reasons.pop("gone.txt") == "a broken symbolic link, or the file is gone"
    assert reasons.pop("secret.txt").startswith("unreadable: ")
    assert reasons == {}
    assert isinstance(loaded["code/lamp.py"], Loaded)  # the rest are still read
    assert sum(isinstance(f, Loaded) for f in loaded.values()) == 12


def test_a_run_stops_at_the_file_limit(tree):
    items = list(walk_files(tree, Selection(max_files=3)))
    assert [isinstance(i, Found) for i in items] == [True, True, True, False]
    assert items[-1].reason.startswith("over the limit of 3 files per run")


@pytest.mark.parametrize(("rule", "source", "is_dir", "matched"), [
    ("**/lamp.go", "code/lamp.go", False, True),
    ("**/lamp.go", "lamp.go", False, True),
    ("docs/**/*.html", "docs/a/b/page.html", False, True),
    ("docs/**/*.html", "other/docs/page.html", False, False),
    ("/code", "code", True, True),
    ("/code", "x/code", True, False),
    ("lamp.?s", "code/lamp.js", False, True),
    ("lamp.[jt]s", "code/lamp.rs", False, False),
    ("out/", "out", False, False),  # a file named like an ignored folder stays
    ("\\#notes", "#notes", False, True),
    ("draft\\ ", "draft ", False, True),  # a trailing space kept by its backslash, as git does
    ("draft\\ ", "draft", False, False),
    ("tmp/**", "tmp/a/b.txt", False, True),
])
def test_gitignore_patterns(rule, source, is_dir, matched):
    from zapomni.shared.text.files import ignored, parse_gitignore

    assert ignored(parse_gitignore(rule, ""), source, is_dir) is matched


def test_gzip_files_are_read_by_the_name_inside(tmp_path):
    """Debian's /usr/share/doc is mostly changelog.gz, NEWS.gz, README.md.gz."""
    (tmp_path / "README.md.gz").write_bytes(gzip.compress(b"# Beacon\nThe lamp turns.\n"))
    (tmp_path / "changelog.gz").write_bytes(gzip.compress(b"beacon (1.2) stable\n"))
    (tmp_path / "broken.gz").write_bytes(b"\x1f\x8b\x08 not really gzip")
    (tmp_path / "bomb.txt.gz").write_bytes(gzip.compress(b"a" * 5000))
    (tmp_path / "blob.bin.gz").write_bytes(gzip.compress(b"\x00\x01binary"))
    found = load_all(tmp_path, Selection(max_bytes=4000))
    readme, changelog = found["README.md.gz"], found["changelog.gz"]
    assert (readme.text, readme.metadata["type"], readme.metadata["title"]) == (
        "# Beacon\nThe lamp turns.\n", "markdown", "Beacon")
    assert (changelog.text, changelog.metadata["type"]) == ("beacon (1.2) stable\n", "text")
    assert found["broken.gz"] == Skipped("broken.gz", "a corrupt gzip file")
    assert found["bomb.txt.gz"] == Skipped(
        "bomb.txt.gz", "too big: over 4,000 bytes uncompressed (ZAPOMNI_INGEST_MAX_FILE_BYTES)")
    assert found["blob.bin.gz"] == Skipped("blob.bin.gz", "binary (not text, PDF or DOCX)")


def test_a_walk_continues_after_any_file_exactly_as_the_whole_walk_goes_on(tree, monkeypatch):
    """From the cursor (a file's source) on, the same items as the whole walk, the limit of
    files counted the same; and no folder wholly before the cursor is listed again."""
    import zapomni.shared.text.files as files

    (tree / "code" / "deep" / "er").mkdir(parents=True)
    (tree / "code" / "deep" / "a.md").write_text("deep")
    (tree / "code" / "deep" / "er" / "b.md").write_text("deeper")
    (tree / "docs" / "again").symlink_to(tree)  # a loop, said again in every slice
    (tree / "gone.txt").symlink_to(tree / "nothing-here.txt")
    listed: list[str] = []
    listdir = os.listdir

    def recording(path):
        listed.append(Path(path).relative_to(tree).as_posix().strip("."))
        return listdir(path)

    monkeypatch.setattr(files.os, "listdir", recording)
    for limit in (100, 9):
        whole = list(walk_files(tree, Selection(max_files=limit)))
        limited = getattr(whole[-1], "reason", "").startswith("over the limit of 9 files")
        assert limited == (limit == 9)
        found = [i for i, item in enumerate(whole) if isinstance(item, Found)]
        for n, i in enumerate(found, start=1):
            listed.clear()
            cursor = files.walk_key(whole[i].source)
            rest = list(walk_files(tree, Selection(max_files=limit), whole[i].source, n))
            assert rest == whole[i + 1:], whole[i].source
            for folder in listed:
                key = tuple((1, part) for part in folder.split("/")) if folder else ()
                assert cursor[:len(key)] == key or key > cursor, (whole[i].source, folder)


# ---- reading only inside the roots (ingest_path: Selection.within), and bounded ----


@pytest.fixture
def confined(tmp_path: Path) -> tuple[Path, Path]:
    """(a root ingest_path may read, a secret file outside it)."""
    root = tmp_path / "allowed"
    shutil.copytree(TREE, root)
    (tmp_path / "private").mkdir()
    secret = tmp_path / "private" / "secret.md"
    secret.write_text("# Secret\nthe vault code is 1234")
    return root, secret


def walk_then(root: Path, act=None) -> dict[str, Loaded | Skipped]:
    """Walk ``root`` inside itself, run ``act`` after the walk and before any read, then
    read what the walk found."""
    selection = Selection(within=(root.resolve().as_posix(),))
    items = list(walk_files(root, selection))
    if act is not None:
        act()
    return {item.source: item if isinstance(item, Skipped) else
            load_file(item, "the-root", selection.max_bytes) for item in items}


def test_a_file_swapped_for_a_link_after_the_walk_is_not_read(confined):
    root, secret = confined

    def swap() -> None:
        (root / "notes.txt").unlink()
        (root / "notes.txt").symlink_to(secret)

    loaded = walk_then(root, swap)
    assert loaded["notes.txt"] == Skipped(
        "notes.txt", "a symbolic link out of the allowed roots (ZAPOMNI_INGEST_ROOTS)")
    assert not any("vault" in item.text for item in loaded.values()
                   if isinstance(item, Loaded))
    assert isinstance(loaded["README.md"], Loaded)  # the rest are read


def test_a_folder_swapped_for_a_link_while_it_is_read_is_not_followed(confined, monkeypatch):
    """The real path is resolved inside the roots; a folder on it turned into a link before
    the open (acted at that seam) is not followed: every part is opened without links."""
    import zapomni.shared.text.roots as roots

    root, secret = confined
    (root / "code" / "secret.md").write_text("# Decoy\nnothing here")
    realpath = roots.os.path.realpath

    def swap_after_resolving(path, strict=False):
        real = realpath(path, strict=strict)
        if str(path).endswith("code/secret.md") and not (root / "code").is_symlink():
            (root / "code").rename(root / "code-old")
            (root / "code").symlink_to(secret.parent)
        return real

    monkeypatch.setattr(roots.os.path, "realpath", swap_after_resolving)
    loaded = walk_then(root)
    assert loaded["code/secret.md"] == Skipped(
        "code/secret.md", "changed into a symbolic link after it was found; not followed "
        "(ZAPOMNI_INGEST_ROOTS)")


def test_a_folder_swapped_for_a_link_before_it_is_listed_is_not_listed(confined):
    root, secret = confined
    (secret.parent / "diary.txt").write_text("private")
    selection = Selection(within=(root.resolve().as_posix(),))
    walk = walk_files(root, selection)
    items = []
    for item in walk:  # code/ comes before docs/, which the walk has met but not listed
        items.append(item)
        if item.source.startswith("code/"):
            break
    shutil.rmtree(root / "docs")
    (root / "docs").symlink_to(secret.parent)
    items += list(walk)
    assert Skipped("docs", "a symbolic link out of the allowed roots (ZAPOMNI_INGEST_ROOTS)") \
        in items
    assert not any(getattr(item, "source", "").startswith("docs/") for item in items)


def test_a_hard_link_is_not_read(confined):
    """A hard link to a file outside the roots is a name of that file like any other:
    ingest_path cannot tell where its other names are, so it reads no hard-linked file."""
    root, secret = confined
    os.link(secret, root / "linked.md")
    loaded = walk_then(root)
    assert loaded["linked.md"] == Skipped(
        "linked.md", "a hard link (the file has 2 names): ingest_path cannot tell whether "
        "the others are inside ZAPOMNI_INGEST_ROOTS, so it reads no hard-linked file; copy "
        "the file into the folder instead")
    assert isinstance(load_file(Found(str(root / "linked.md"), "linked.md"), "k", 10_000),
                      Loaded)  # zapomni ingest, on the user's own machine, reads it


def counting_reads(monkeypatch, cls) -> list[int]:
    """Bytes each ``cls.read`` returned (decompressed)."""
    sizes: list[int] = []
    read = cls.read

    def counted(self, *args):
        data = read(self, *args)
        sizes.append(len(data))
        return data

    monkeypatch.setattr(cls, "read", counted)
    return sizes


# the bounds of shared/text/extract_text.py, written out: a test of them must not move with them
MAX_DOCX_XML_BYTES = 64 << 20
MAX_PDF_CONTENT_BYTES = MAX_PDF_STREAM_BYTES = 8 << 20


def test_a_zip_bomb_docx_is_skipped_and_not_read_past_the_bound(tmp_path, monkeypatch):
    import zipfile

    bomb = make_docx(["a" * MAX_DOCX_XML_BYTES], "Bomb")
    assert len(bomb) < 200_000  # 64 MiB of XML in a small file
    (tmp_path / "bomb.docx").write_bytes(bomb)
    sizes = counting_reads(monkeypatch, zipfile.ZipExtFile)
    loaded = load_all(tmp_path)
    assert loaded["bomb.docx"] == Skipped(
        "bomb.docx", f"too big: its word/document.xml is over {MAX_DOCX_XML_BYTES:,} bytes "
        "uncompressed")
    assert sum(sizes) <= MAX_DOCX_XML_BYTES + 1


def test_a_docx_with_a_dtd_is_skipped(tmp_path):
    import zipfile

    laughs = ('<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a "aaaaaaaaaa">'
              '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
              f'<w:document xmlns:w="{W}"><w:body><w:p><w:r><w:t>&b;</w:t></w:r></w:p>'
              '</w:body></w:document>')
    out = tmp_path / "laughs.docx"
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("word/document.xml", laughs)
    assert load_all(tmp_path)["laughs.docx"] == Skipped(
        "laughs.docx", "a corrupt DOCX (word/document.xml declares a DTD, which Word never "
        "writes)")


def test_a_gzip_bomb_is_skipped_and_not_read_past_the_bound(tmp_path, monkeypatch):
    (tmp_path / "bomb.txt.gz").write_bytes(gzip.compress(b"a" * 50_000_000))
    sizes = counting_reads(monkeypatch, gzip.GzipFile)
    assert load_all(tmp_path, Selection(max_bytes=1_000_000))["bomb.txt.gz"] == Skipped(
        "bomb.txt.gz", "too big: over 1,000,000 bytes uncompressed "
        "(ZAPOMNI_INGEST_MAX_FILE_BYTES)")
    assert sum(sizes) <= 1_000_001


def test_a_pdf_whose_pages_unpack_past_the_bound_is_skipped(tmp_path):
    """One small stream drawn on 9 pages counts on every page (it is unpacked and parsed for
    each); one stream over pypdf's limit for a stream is refused by pypdf itself."""
    page = 1 << 20
    pages = MAX_PDF_CONTENT_BYTES // page + 1
    (tmp_path / "pages.pdf").write_bytes(make_pdf_drawn_on(pages, b" " * page))
    (tmp_path / "stream.pdf").write_bytes(make_pdf_drawn_on(1, b" " * (MAX_PDF_STREAM_BYTES
                                                                      + 1)))
    loaded = load_all(tmp_path)
    assert loaded["pages.pdf"] == Skipped(
        "pages.pdf", f"too big: its pages hold over {MAX_PDF_CONTENT_BYTES:,} bytes of "
        "content uncompressed")
    assert loaded["stream.pdf"].reason.startswith(
        "too big: a stream or a page of it is over the PDF reader's limits")
