"""Symbols of source code from its tree-sitter syntax tree: what a file defines and what it
refers to. Pure functions; the graph task writes them (workers/code_graph.py). Python's reader
is shared/text/code_python.py; the other grammars' definitions are read here by a table.

Definitions: the module (its dotted name from the source path: ``asyncio/tasks.py`` is
``asyncio.tasks``, ``pkg/__init__.py`` is ``pkg``), its classes, functions, methods (a
function in a class body) and module-level constants (an UPPER_CASE name assigned at module
level), each with its dotted name, kind and lines (a decorated definition starts at its first
decorator). Definitions under an ``if`` or ``try`` at module or class level count (platform
variants); functions inside functions are locals, not symbols. A name defined twice is its
last definition, as Python binds it.

References (Python): ``imports`` (module -> the module or name imported), ``inherits``
(class -> base), ``calls`` (the innermost definition around a call -> what it calls) and
``uses`` (-> a name of the module or of an import read without a call), each with its line.
A reference's target is a dotted name resolved through the file's imports (relative ones
against the module's package), its own top-level names and ``self``/``cls`` in a class;
a name a star import may bring is tried in each star-imported module. Whether a target exists
is the namespace's to say (the graph links only names some file defines): ``len`` or ``os``
resolve to nothing there. JavaScript and TypeScript (tsx too), Go, Rust and Java: definitions
only, by a table of their grammars' node types.
"""

from __future__ import annotations

import functools
import re

from tree_sitter import Language, Node, Parser

from zapomni.shared.text.chunking import LANGUAGES
from zapomni.shared.text.code_python import MAX_REFERENCES, PythonReader
from zapomni.shared.text.code_tree import (
    CONSTANT,
    Definition,
    Symbols,
    end_line,
    line,
    text_of,
)

_WORDS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def module_name(source: str) -> str:
    """``asyncio/tasks.py`` -> ``asyncio.tasks``; ``pkg/__init__.py`` -> ``pkg``; a path
    without folders is its file's stem."""
    path = source.replace("\\", "/").strip("/")
    stem, _, ext = path.rpartition(".")
    parts = [p for p in (stem if stem and "/" not in ext else path).split("/") if p]
    if len(parts) > 1 and parts[-1] in ("__init__", "index", "mod"):
        parts = parts[:-1]
    return ".".join(parts) or "module"


def name_words(name: str) -> list[str]:
    """The words of an identifier's parts, lower case: ``BaseEventLoop.run_until_complete``
    -> base, event, loop, run, until, complete (how questions name symbols in prose)."""
    return [w.lower() for part in re.split(r"[._\W]+", name) for w in _WORDS.findall(part)]


@functools.cache
def parser(language: str) -> Parser:
    return Parser(Language(LANGUAGES[language]()))


def read_symbols(text: str, language: str, source: str) -> Symbols:
    """The symbols of one file (``language``: a key of chunking.LANGUAGES)."""
    module = module_name(source)
    symbols = Symbols(module)
    lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    symbols.definitions.append(Definition(module, "module", 1, max(1, lines)))
    if language not in LANGUAGES:
        return symbols
    root = parser(language).parse(text.encode("utf-8")).root_node
    if language == "python":
        PythonReader(symbols, source.endswith("__init__.py")).read(root)
    else:
        read_definitions(root, module, TABLES.get(language, {}), symbols.definitions)
    return last_definitions(symbols)


def last_definitions(symbols: Symbols) -> Symbols:
    """One definition per name, the last (as Python binds it), in line order."""
    by_name = {d.name: d for d in symbols.definitions}
    symbols.definitions = sorted(by_name.values(), key=lambda d: (d.start_line, d.name))
    symbols.references = symbols.references[:MAX_REFERENCES]
    return symbols


# language -> node type -> kind ("class" nodes hold methods; "function" nodes are not entered)
TABLES: dict[str, dict[str, str]] = {
    "javascript": {"class_declaration": "class", "function_declaration": "function",
                   "generator_function_declaration": "function",
                   "method_definition": "function", "variable_declarator": "value"},
    "go": {"type_spec": "class", "function_declaration": "function",
           "method_declaration": "function", "const_spec": "value"},
    "rust": {"struct_item": "class", "enum_item": "class", "trait_item": "class",
             "impl_item": "impl", "function_item": "function", "const_item": "value",
             "static_item": "value"},
    "java": {"class_declaration": "class", "interface_declaration": "class",
             "enum_declaration": "class", "record_declaration": "class",
             "method_declaration": "function", "constructor_declaration": "function"},
}
TABLES["typescript"] = TABLES["tsx"] = {
    **TABLES["javascript"], "abstract_class_declaration": "class",
    "interface_declaration": "class", "function_signature": "function"}
_FUNCTION_VALUES = {"arrow_function", "function_expression", "function", "generator_function"}


def read_definitions(node: Node, scope: str, table: dict[str, str],
                     found: list[Definition], in_class: bool = False) -> None:
    """Definitions by ``table``: a class's members are its methods; a function's body is
    not entered (locals); any other node is looked through (exports, declarations)."""
    for child in node.named_children:
        kind = table.get(child.type)
        name = definition_name(child, kind) if kind else ""
        if kind is None and child.type not in _FUNCTION_VALUES:  # a body holds locals
            read_definitions(child, scope, table, found, in_class)
        elif kind == "impl" and name:  # Rust: an impl's functions are methods of its type
            read_definitions(child, f"{scope}.{name}", table, found, in_class=True)
        elif kind == "value" and name:
            add_value(child, scope, name, found, in_class)
        elif kind and name:
            add_definition(child, scope, (name, kind), table, found, in_class)


def first_line(node: Node) -> int:
    """Where a definition starts: at the export or decorator around it."""
    wrapped = node.parent is not None and node.parent.type in ("export_statement",
                                                                "decorated_definition")
    return line(node.parent) if wrapped and node.parent is not None else line(node)


def add_value(node: Node, scope: str, name: str, found: list[Definition],
              in_class: bool) -> None:
    """``const f = () => ...`` is a function; ``const LIMIT = 10`` at module level a
    constant; any other variable nothing."""
    value = node.child_by_field_name("value")
    if in_class:
        return
    if value is not None and value.type in _FUNCTION_VALUES:
        found.append(Definition(f"{scope}.{name}", "function", first_line(node), end_line(node)))
    elif CONSTANT.match(name) and scope == found[0].name:
        found.append(Definition(f"{scope}.{name}", "constant", first_line(node), end_line(node)))


def add_definition(node: Node, scope: str, named: tuple[str, str], table: dict[str, str],
                   found: list[Definition], in_class: bool) -> None:
    """A class (and its members), function or method; ``named``: (name, kind)."""
    name, kind = named
    dotted = f"{scope}.{name}"
    if node.type == "method_declaration" and node.child_by_field_name("receiver") is not None:
        dotted, kind = f"{scope}.{receiver_type(node)}.{name}", "method"  # Go
    elif kind == "function" and in_class:
        kind = "method"
    found.append(Definition(dotted, kind, first_line(node), end_line(node)))
    if kind == "class":
        read_definitions(node, dotted, table, found, in_class=True)


def definition_name(node: Node, kind: str) -> str:
    field_name = "type" if kind == "impl" else "name"
    name = node.child_by_field_name(field_name)
    if name is None or name.type in ("object_pattern", "array_pattern"):
        return ""
    return text_of(name).split("<", 1)[0].strip()


def receiver_type(node: Node) -> str:
    """Go: the type a method's receiver names (``(s *Server)`` -> ``Server``)."""
    words = re.findall(r"[A-Za-z_]\w*", text_of(node.child_by_field_name("receiver")))
    return words[-1] if words else "_"
