"""Symbols from the syntax tree (shared/text/code_symbols.py): definitions checked against
Python's own ast on the vendored files, references resolved through imports, the other
grammars' definitions, and how the graph task splits a file's symbols among its chunks."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from zapomni.shared.text.code_symbols import module_name, name_words, read_symbols
from zapomni.shared.text.code_tree import Reference
from zapomni.workers.graph import CodeMemory, Contribution, contribute, owner

DATA = Path(__file__).parents[1] / "data"
SHAPES = (DATA / "code_graph" / "shapes.py").read_text()
REPORT = (DATA / "code_graph" / "report.py").read_text()


@pytest.mark.parametrize(("source", "module"), [
    ("asyncio/tasks.py", "asyncio.tasks"), ("pkg/__init__.py", "pkg"), ("tool.py", "tool"),
    ("src/app/index.js", "src.app"), ("urllib3/contrib/worker.js", "urllib3.contrib.worker"),
])
def test_module_names_come_from_the_source_path(source, module):
    assert module_name(source) == module


def test_name_words_split_snake_case_camel_case_and_dots():
    assert name_words("BaseEventLoop.run_until_complete") == [
        "base", "event", "loop", "run", "until", "complete"]
    assert name_words("HTTPConnectionPool._get_conn") == ["http", "connection", "pool", "get",
                                                          "conn"]


def ast_truth(text: str, module: str) -> set[tuple[str, str, int, int]]:
    """What ast says the file defines at module and class level (decorators included)."""
    found = {(module, "module", 1, text.count("\n"))}

    def visit(body: list[ast.stmt], prefix: str, in_class: bool) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                kind = ("class" if isinstance(node, ast.ClassDef)
                        else "method" if in_class else "function")
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                found.add((f"{prefix}.{node.name}", kind, start, node.end_lineno))
                if isinstance(node, ast.ClassDef):
                    visit(node.body, f"{prefix}.{node.name}", True)
            elif isinstance(node, ast.Assign) and not in_class:
                found.update((f"{prefix}.{t.id}", "constant", node.lineno, node.end_lineno)
                             for t in node.targets if isinstance(t, ast.Name) and t.id.isupper())

    visit(ast.parse(text).body, module, False)
    return found


@pytest.mark.parametrize("name", ["code/inventory.py", "code_graph/shapes.py",
                                  "code_graph/report.py"])
def test_python_definitions_are_what_ast_sees(name):
    text = (DATA / name).read_text()
    symbols = read_symbols(text, "python", f"pkg/{Path(name).name}")
    assert {(d.name, d.kind, d.start_line, d.end_line) for d in symbols.definitions} == \
        ast_truth(text, f"pkg.{Path(name).stem}")


def test_references_resolve_through_imports_self_and_the_module():
    symbols = read_symbols(REPORT, "python", "pkg/report.py")
    line = {needle: REPORT[:REPORT.index(needle)].count("\n") + 1
            for needle in ("from pkg", "class Square", "return square_area", "s.area()")}
    assert Reference("pkg.report", "pkg.shapes.square_area", "imports",
                     line["from pkg"]) in symbols.references
    assert Reference("pkg.report.Square", "pkg.shapes.Shape", "inherits",
                     line["class Square"]) in symbols.references
    assert Reference("pkg.report.Square.area", "pkg.shapes.square_area", "calls",
                     line["return square_area"]) in symbols.references
    assert Reference("pkg.report.total", "pkg.report.Square", "uses",
                     line["s.area()"] - 1) in symbols.references
    # a builtin, a parameter's method and a local are no one's symbols
    targets = {r.target for r in symbols.references}
    assert not any(t.endswith((".sum", ".area")) and not t.startswith("pkg.") for t in targets)
    assert "sum" not in targets and "pkg.report.s" not in targets


def test_relative_imports_start_from_the_package():
    text = "from . import events\nfrom .tasks import Task as T\nfrom .. import top\n"
    inside = read_symbols(text, "python", "asyncio/runners.py")
    package = read_symbols(text, "python", "asyncio/__init__.py")
    assert [r.target for r in inside.references] == ["asyncio.events", "asyncio.tasks.Task",
                                                     "top"]
    assert [r.target for r in package.references] == ["asyncio.events", "asyncio.tasks.Task",
                                                      "top"]


def test_a_name_defined_twice_is_its_last_definition_and_locals_are_not_symbols():
    text = ("import sys\n\nif sys.platform == 'win32':\n    def pick():\n        return 1\n"
            "else:\n    def pick():\n        def helper():\n            return 2\n"
            "        return helper()\n\nlimit = 3\nLIMIT = 4\n")
    symbols = read_symbols(text, "python", "m.py")
    assert [(d.name, d.kind, d.start_line, d.end_line) for d in symbols.definitions] == [
        ("m", "module", 1, 13), ("m.pick", "function", 7, 10), ("m.LIMIT", "constant", 13, 13)]


@pytest.mark.parametrize(("name", "language", "expected"), [
    ("inventory.js", "javascript", {("makeItem", "function"), ("Ledger", "class"),
                                    ("Ledger.record", "method"), ("Ledger.balance", "method"),
                                    ("Ledger.constructor", "method"), ("restock", "function"),
                                    ("inventoryValue", "function")}),
    ("inventory.ts", "typescript", {("Item", "class"), ("restock", "function"),
                                    ("inventoryValue", "function"), ("Ledger", "class"),
                                    ("Ledger.record", "method"), ("Ledger.balance", "method")}),
    ("inventory.go", "go", {("Item", "class"), ("Restock", "function"),
                            ("InventoryValue", "function"), ("Ledger", "class"),
                            ("Ledger.Record", "method"), ("Ledger.Balance", "method")}),
    ("inventory.rs", "rust", {("Item", "class"), ("restock", "function"),
                              ("inventory_value", "function"), ("Ledger", "class"),
                              ("Ledger.record", "method"), ("Ledger.balance", "method")}),
    ("Inventory.java", "java", {("Inventory", "class"), ("Inventory.restock", "method"),
                                ("Inventory.inventoryValue", "method"),
                                ("Inventory.cheapest", "method")}),
])
def test_other_grammars_give_their_definitions(name, language, expected):
    text = (DATA / "code" / name).read_text()
    symbols = read_symbols(text, language, f"src/{name}")
    module = module_name(f"src/{name}")
    assert {(d.name[len(module) + 1:], d.kind) for d in symbols.definitions[1:]} == expected
    for d in symbols.definitions[1:]:  # each starts on a line that names it
        assert d.name.rsplit(".", 1)[1] in text.splitlines()[d.start_line - 1] or \
            d.kind == "class"


def chunked(text: str, starts: list[int]) -> CodeMemory:
    return CodeMemory("mem_x", read_symbols(text, "python", "pkg/report.py"), "pkg/report.py",
                      0, [(line, i, f"mem_x:{i}") for i, line in enumerate(starts)])


def test_each_definition_and_reference_belongs_to_the_chunk_holding_its_line():
    memory = chunked(REPORT, [1, 6, 14])
    assert [owner(memory, n) for n in (1, 5, 6, 13, 14, 99)] == [
        "mem_x:0", "mem_x:0", "mem_x:1", "mem_x:1", "mem_x:2", "mem_x:2"]
    second = Contribution()
    contribute(memory, {"mem_x:1"}, second)
    assert {e["name"] for e in second.entities} == {
        "pkg.report.Square", "pkg.report.Square.__init__", "pkg.report.Square.area"}
    assert [c["id"] for c in second.chunks] == ["mem_x:1"]
    assert "pkg.shapes.square_area" in second.chunks[0]["targets"]
    kinds = {rel["kind"] for rel in second.related.values()}
    assert kinds == {"defines", "inherits", "calls", "uses"}
    # every chunk's part, together, is the whole file's, each definition once
    whole = Contribution()
    contribute(memory, {"mem_x:0", "mem_x:1", "mem_x:2"}, whole)
    assert sorted(e["name"] for e in whole.entities) == sorted(
        d.name for d in memory.symbols.definitions)


def test_a_definition_carries_its_docstrings_first_sentence():
    text = ('"""Shapes. And more."""\n\nclass A:\n    """An A.\n\n    Details."""\n\n'
            '    def f(self):\n        """Return\n        one. Or two."""\n        return 1\n')
    symbols = read_symbols(text, "python", "m.py")
    assert [(d.name, d.summary) for d in symbols.definitions] == [
        ("m", "Shapes."), ("m.A", "An A."), ("m.A.f", "Return one.")]
