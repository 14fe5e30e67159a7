"""Symbols of source code from its tree-sitter syntax tree: what a file defines and what it
refers to. Pure functions; the graph task writes them (workers/code_graph.py).

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
from collections.abc import Iterator
from dataclasses import dataclass, field

from tree_sitter import Language, Node, Parser

from zapomni.shared.text.chunking import LANGUAGES

MAX_REFERENCES = 20_000  # references read from one file, at most (bounded like the file)
MAX_SUMMARY = 200  # characters of a docstring's first sentence kept
_SENTENCE = re.compile(r"(?<=[.!?])\s")
_CONSTANT = re.compile(r"^_*[A-Z][A-Z0-9_]*$")
_WORDS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_SELF = ("self", "cls")
_PY_BLOCKS = {"if_statement", "elif_clause", "else_clause", "try_statement", "except_clause",
              "finally_clause", "block", "decorated_definition"}
# identifiers under these bind or name something rather than read it
_PY_BINDING = {"parameters", "typed_parameter", "aliased_import", "dotted_name",
               "import_statement", "import_from_statement", "lambda_parameters",
               "global_statement", "nonlocal_statement"}


@dataclass(frozen=True)
class Definition:
    name: str  # dotted
    kind: str  # one of CODE_TYPES (shared/text/entities.py)
    start_line: int
    end_line: int
    summary: str = ""  # the first sentence of its docstring (Python)


@dataclass(frozen=True)
class Reference:
    source: str  # the dotted name of the definition it occurs in (a module at top level)
    target: str  # dotted, as resolved in the file; the namespace may define it or not
    kind: str  # imports | inherits | calls | uses
    line: int


@dataclass
class Symbols:
    module: str
    definitions: list[Definition] = field(default_factory=list)
    references: list[Reference] = field(default_factory=list)


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


def text_of(node: Node | None) -> str:
    return node.text.decode("utf-8", "replace") if node is not None and node.text else ""


def line(node: Node) -> int:
    return node.start_point[0] + 1


def end_line(node: Node) -> int:
    """The last line of the node's code: comments after its last statement are not part of
    it (as Python's own ast sees it); a node ending at column 0 ends on the line before."""
    code = [kid for kid in node.named_children if kid.type != "comment"]
    if code and (node.children[-1].type == "comment" or code[-1].end_point == node.end_point):
        return end_line(code[-1])
    row, column = node.end_point
    return row + (1 if column > 0 or row == node.start_point[0] else 0)


class PythonReader:
    """One walk over a Python tree: definitions, then references with the names resolved."""

    def __init__(self, symbols: Symbols, is_package: bool) -> None:
        self.symbols = symbols
        self.module = symbols.module
        self.is_package = is_package  # relative imports start from the module itself
        self.names: set[str] = set()  # every definition's dotted name
        self.aliases: dict[str, str] = {}  # local name -> dotted name it stands for
        self.stars: list[str] = []  # modules star-imported
        self.top: set[str] = set()  # the module's own top-level names

    def read(self, root: Node) -> None:
        module = self.symbols.definitions[0]
        self.symbols.definitions[0] = Definition(module.name, module.kind, module.start_line,
                                                 module.end_line, docstring(root))
        self.define(root, self.module, in_class=False)
        self.names = {d.name for d in self.symbols.definitions}
        self.top = {d.name.rsplit(".", 1)[1] for d in self.symbols.definitions
                    if d.name.count(".") == self.module.count(".") + 1}
        self.walk(root, self.module, "")

    def package(self, dots: int) -> str:
        """The package a relative import of ``dots`` dots starts from."""
        parts = self.module.split(".")
        keep = len(parts) - dots + (1 if self.is_package else 0)
        return ".".join(parts[:max(0, keep)])

    # ---- definitions ----

    def define(self, node: Node, scope: str, in_class: bool) -> None:
        for child in node.named_children:
            target = child.child_by_field_name("definition") or child
            start = line(child)
            if target.type in ("class_definition", "function_definition"):
                name = f"{scope}.{text_of(target.child_by_field_name('name'))}"
                body = target.child_by_field_name("body")
                kind = ("class" if target.type == "class_definition"
                        else "method" if in_class else "function")
                self.add(Definition(name, kind, start, end_line(target), docstring(body)))
                if kind == "class":
                    self.define(body or target, name, True)
            elif child.type == "expression_statement" and not in_class and scope == self.module:
                for constant in assigned_constants(child):
                    self.add(Definition(f"{scope}.{constant}", "constant", start,
                                        end_line(child)))
            elif child.type in _PY_BLOCKS:
                self.define(child, scope, in_class)

    def add(self, definition: Definition) -> None:
        self.symbols.definitions.append(definition)

    # ---- references ----

    def walk(self, node: Node, scope: str, klass: str) -> None:
        """``scope``: the innermost symbol around ``node``; ``klass``: the class whose body
        (or method) holds it, for ``self``."""
        for child in node.named_children:
            kind = child.type
            if kind == "decorated_definition":
                self.walk(child, scope, klass)
            elif kind == "class_definition":
                self.read_class(child, scope, klass)
            elif kind == "function_definition":
                self.read_function(child, scope, klass)
            elif kind in ("import_statement", "import_from_statement"):
                self.read_import(child, scope)
            elif kind == "call":
                self.read_call(child, scope, klass)
            elif kind in ("attribute", "identifier"):
                self.read_name(child, scope, klass)
            else:
                self.walk(child, scope, klass)

    def symbol_scope(self, node: Node, scope: str) -> str:
        """A definition's own dotted name when it is a symbol (not inside a function)."""
        name = f"{scope}.{text_of(node.child_by_field_name('name'))}"
        return name if name in self.names else scope

    def read_class(self, node: Node, scope: str, klass: str) -> None:
        own = self.symbol_scope(node, scope)
        bases = node.child_by_field_name("superclasses")
        for base in bases.named_children if bases is not None else []:
            if base.type in ("identifier", "attribute"):
                for target in self.resolve(text_of(base), klass):
                    self.refer(own, target, "inherits", base)
        self.walk(node.child_by_field_name("body") or node, own,
                  own if own != scope else klass)

    def read_function(self, node: Node, scope: str, klass: str) -> None:
        own = self.symbol_scope(node, scope)
        for part in ("parameters", "return_type", "body"):
            child = node.child_by_field_name(part)
            if child is not None:
                self.walk(child, own, klass)

    def read_call(self, node: Node, scope: str, klass: str) -> None:
        function = node.child_by_field_name("function")
        if function is not None and function.type in ("identifier", "attribute") \
                and is_chain(function):
            for target in self.resolve(text_of(function), klass):
                self.refer(scope, target, "calls", node)
        elif function is not None:
            self.walk_node(function, scope, klass)
        arguments = node.child_by_field_name("arguments")
        if arguments is not None:
            self.walk(arguments, scope, klass)

    def walk_node(self, node: Node, scope: str, klass: str) -> None:
        if node.type == "call":
            self.read_call(node, scope, klass)
        elif node.type in ("attribute", "identifier"):
            self.read_name(node, scope, klass)
        else:
            self.walk(node, scope, klass)

    def read_name(self, node: Node, scope: str, klass: str) -> None:
        if binds(node):
            return
        if not is_chain(node):
            self.walk(node, scope, klass)
            return
        head = text_of(node).split(".", 1)[0]
        if head in self.aliases or head in self.top or (head in _SELF and klass):
            for target in self.resolve(text_of(node), klass, stars=False):
                self.refer(scope, target, "uses", node)

    def read_import(self, node: Node, scope: str) -> None:
        if node.type == "import_statement":
            for item in node.named_children:
                dotted = text_of(item.child_by_field_name("name") or item)
                alias = text_of(item.child_by_field_name("alias"))
                self.aliases[alias or dotted.split(".")[0]] = dotted if alias \
                    else dotted.split(".")[0]
                self.refer(scope, dotted, "imports", item)
            return
        origin = self.from_module(node.child_by_field_name("module_name"))
        for item in node.named_children:
            if item.type == "wildcard_import":
                self.stars.append(origin)
                self.refer(scope, origin, "imports", item)
        for item in node.children_by_field_name("name"):
            if item:
                name = text_of(item.child_by_field_name("name") or item)
                alias = text_of(item.child_by_field_name("alias"))
                dotted = f"{origin}.{name}" if origin else name
                self.aliases[alias or name] = dotted
                self.refer(scope, dotted, "imports", item)

    def from_module(self, node: Node | None) -> str:
        """The dotted module of ``from X import``, a relative X resolved."""
        written = text_of(node)
        dots = len(written) - len(written.lstrip("."))
        if not dots:
            return written
        base = self.package(dots)
        rest = written[dots:]
        return f"{base}.{rest}" if base and rest else base or rest

    def resolve(self, dotted: str, klass: str, stars: bool = True) -> list[str]:
        """The dotted names a name written in the file may stand for (none: a local, a
        parameter or a builtin the file does not bind)."""
        head, _, rest = dotted.partition(".")
        tail = f".{rest}" if rest else ""
        if head in _SELF:
            return [f"{klass}.{rest}"] if klass and rest and "." not in rest else []
        if head in self.aliases:
            return [self.aliases[head] + tail]
        if head in self.top:
            return [f"{self.module}.{dotted}"]
        return [f"{star}.{dotted}" for star in self.stars] if stars else []

    def refer(self, source: str, target: str, kind: str, node: Node) -> None:
        if target and len(self.symbols.references) < MAX_REFERENCES:
            self.symbols.references.append(Reference(source, target, kind, line(node)))


def docstring(body: Node | None) -> str:
    """The first sentence of the docstring opening a module, class or function body."""
    first = body.named_children[0] if body is not None and body.named_children else None
    if first is None or first.type != "expression_statement" or not first.named_children \
            or first.named_children[0].type != "string":
        return ""
    text = "".join(text_of(part) for part in first.named_children[0].named_children
                   if part.type == "string_content")
    paragraph = " ".join(text.strip().split("\n\n", 1)[0].split())
    return _SENTENCE.split(paragraph, 1)[0][:MAX_SUMMARY]


def binds(node: Node) -> bool:
    """Whether a name binds or names something (a parameter, a keyword, an attribute's
    name, a definition's name, an import) rather than reading it."""
    parent = node.parent
    if parent is None:
        return False
    if parent.type in _PY_BINDING:
        return True
    return parent.child_by_field_name("name") == node or (
        parent.type == "attribute" and parent.child_by_field_name("attribute") == node)


def is_chain(node: Node) -> bool:
    """``a`` or ``a.b.c``: names and attributes only (not ``f().x`` or ``a[0].b``)."""
    while node.type == "attribute":
        node = node.child_by_field_name("object")
        if node is None:
            return False
    return node.type == "identifier"


def assigned_constants(statement: Node) -> Iterator[str]:
    """UPPER_CASE names a module-level ``A = B = value`` (or ``A: T = value``) binds."""
    node = statement.named_children[0] if statement.named_children else None
    while node is not None and node.type == "assignment":
        left = node.child_by_field_name("left")
        if left is not None and left.type == "identifier" and _CONSTANT.match(text_of(left)):
            yield text_of(left)
        node = node.child_by_field_name("right")


# ---- other grammars: definitions by node type ----
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
    elif _CONSTANT.match(name) and scope == found[0].name:
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
