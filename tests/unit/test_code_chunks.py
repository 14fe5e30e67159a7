"""The syntax-aware chunker (shared/text/chunking.py) on small vendored files (tests/data/code/):
chunks end between definitions, not inside one, and carry the lines they span."""

from __future__ import annotations

from pathlib import Path

import pytest

from zapomni.shared.text.chunking import Chunker, Lines, code_language

CODE = Path(__file__).parents[1] / "data" / "code"
# file -> (language, the first line of each definition the chunker must keep whole)
FILES = {
    "inventory.py": ("python", ["def total_cents", "def restock", "def inventory_value",
                                "def cheapest", "def record", "def balance"]),
    "inventory.js": ("javascript", ["function makeItem", "function restock",
                                    "function inventoryValue", "  record(", "  balance("]),
    "inventory.ts": ("typescript", ["export interface Item", "export function restock",
                                    "export function inventoryValue", "  record(",
                                    "  balance("]),
    "inventory.go": ("go", ["type Item", "func Restock", "func InventoryValue",
                            "func (l *Ledger) Record", "func (l *Ledger) Balance"]),
    "inventory.rs": ("rust", ["pub struct Item", "pub fn restock", "pub fn inventory_value",
                              "    pub fn record", "    pub fn balance"]),
    "Inventory.java": ("java", ["    public void restock", "    public long inventoryValue",
                                "    public Item cheapest"]),
}


@pytest.fixture(scope="module")
def chunker() -> Chunker:
    # about three definitions a chunk: the file never fits in one
    return Chunker(chunk_tokens=96, overlap=16)


def compact(name: str) -> str:
    """The file without its blank lines: a plain text splitter's easiest cut points gone,
    so only the syntax tree says where a definition ends."""
    lines = (CODE / name).read_text().splitlines()
    return "\n".join(line for line in lines if line.strip()) + "\n"


def definition(text: str, head: str) -> str:
    """A definition of the toy files: its first line, through the line that closes it (a
    brace at its indentation), or for Python, the lines indented deeper than it."""
    start = text.index(head)
    lines = text[start:].splitlines()
    indent = len(lines[0]) - len(lines[0].lstrip())
    body = [lines[0]]
    for line in lines[1:]:
        depth = len(line) - len(line.lstrip())
        if line.strip() and depth <= indent and not line.lstrip().startswith((")", "}")):
            break
        body.append(line)
        if line.strip() == "}" and depth == indent:
            break
    return "\n".join(body).strip()


def whole(chunks, text: str, heads: list[str]) -> list[str]:
    """The definitions that lie whole inside one chunk."""
    return [h for h in heads if any(definition(text, h) in c.text for c in chunks)]


@pytest.mark.parametrize("name", sorted(FILES))
def test_code_chunks_keep_each_definition_whole(chunker, name):
    language, heads = FILES[name]
    text = compact(name)
    chunks = chunker.split(text, language)
    assert len(chunks) > 1 and all(c.tokens <= chunker.capacity for c in chunks)
    assert whole(chunks, text, heads) == heads


def test_plain_text_chunks_cut_definitions_the_code_chunks_keep(chunker):
    """What the grammar buys: the same files split as text cut definitions in two."""
    cut = {name: set(heads) - set(whole(chunker.split(compact(name)), compact(name), heads))
           for name, (_, heads) in FILES.items()}
    assert sum(map(len, cut.values())) >= len(FILES), cut


@pytest.mark.parametrize("name", sorted(FILES))
def test_lines_are_those_of_the_chunk_text(chunker, name):
    language, _ = FILES[name]
    text = (CODE / name).read_text()
    lines = text.splitlines()
    chunks = chunker.split(text, language)
    for chunk in chunks:
        assert text[chunk.char_start:chunk.char_end] == chunk.text
        own = chunk.text.splitlines()  # a chunk may start or end inside a line
        assert own[0] in lines[chunk.start_line - 1]
        assert own[-1] in lines[chunk.end_line - 1]
        assert chunk.end_line - chunk.start_line == len(own) - 1
    assert chunks[0].start_line == 1 and chunks[-1].end_line == len(lines)


def test_line_of_an_offset():
    lines = Lines("ab\ncd\n\nef")
    assert [lines.line_of(i) for i in range(9)] == [1, 1, 1, 2, 2, 2, 3, 4, 4]
    assert lines.span(3, 6) == (2, 2)  # "cd\n" ends on its own line
    assert lines.span(0, 9) == (1, 4)
    assert lines.span(7, 7) == (4, 4)  # empty: the line it is on


def test_text_chunks_carry_lines_too(chunker):
    chunks = chunker.split("first line\nsecond line\nthird")
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 3)]
    # a text whose 4 blank lines were stripped: its lines are the file's
    shifted = chunker.split("first line\nsecond line\nthird", line_offset=4)
    assert [(c.start_line, c.end_line) for c in shifted] == [(5, 7)]
    assert Lines("ab\ncd", 2).span(3, 5) == (4, 4)


@pytest.mark.parametrize(("metadata", "language"), [
    ('{"language": "python"}', "python"), ('{"language": "Go"}', "go"),
    ('{"language": "ts"}', "typescript"), ('{"language": "tsx"}', "tsx"),
    ('{"language": "rs", "type": "code"}', "rust"), ('{"language": "cobol"}', ""),
    ('{"language": 3}', ""), ('{"type": "code"}', ""), ("{}", ""), ("[1]", ""), ("{", ""),
])
def test_code_language_from_metadata(metadata, language):
    assert code_language(metadata) == language


def test_an_unknown_language_is_split_as_text(chunker):
    text = compact("inventory.py")
    assert chunker.split(text, "") == chunker.split(text, "cobol")
