"""Python's symbols from its syntax tree (see shared/text/code_symbols.py): definitions at
module and class level, and references resolved through the file's imports, ``self`` and its
own names."""

from __future__ import annotations

from collections.abc import Iterator

from tree_sitter import Node

from zapomni.shared.text.code_tree import (
    CONSTANT,
    Definition,
    Reference,
    Symbols,
    docstring,
    end_line,
    line,
    text_of,
)

MAX_REFERENCES = 20_000  # references read from one file, at most (bounded like the file)
_SELF = ("self", "cls")
_PY_BLOCKS = {"if_statement", "elif_clause", "else_clause", "try_statement", "except_clause",
              "finally_clause", "block", "decorated_definition"}
# identifiers under these bind or name something rather than read it
_PY_BINDING = {"parameters", "typed_parameter", "aliased_import", "dotted_name",
               "import_statement", "import_from_statement", "lambda_parameters",
               "global_statement", "nonlocal_statement"}




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
        if left is not None and left.type == "identifier" and CONSTANT.match(text_of(left)):
            yield text_of(left)
        node = node.child_by_field_name("right")


# ---- other grammars: definitions by node type ----
