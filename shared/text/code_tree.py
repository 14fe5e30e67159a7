"""What the code graph reads from a syntax tree (tree-sitter nodes): the definitions and
references of a file (shared/text/code_symbols.py reads them), and the helpers every grammar's
reader shares: a node's text, its first and last line, a docstring's first sentence."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tree_sitter import Node

MAX_SUMMARY = 200  # characters of a docstring's first sentence kept
SENTENCE = re.compile(r"(?<=[.!?])\s")
CONSTANT = re.compile(r"^_*[A-Z][A-Z0-9_]*$")


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


def docstring(body: Node | None) -> str:
    """The first sentence of the docstring opening a module, class or function body."""
    first = body.named_children[0] if body is not None and body.named_children else None
    if first is None or first.type != "expression_statement" or not first.named_children \
            or first.named_children[0].type != "string":
        return ""
    text = "".join(text_of(part) for part in first.named_children[0].named_children
                   if part.type == "string_content")
    paragraph = " ".join(text.strip().split("\n\n", 1)[0].split())
    return SENTENCE.split(paragraph, 1)[0][:MAX_SUMMARY]
