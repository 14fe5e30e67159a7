"""The text of a file, by its type: Markdown, plain text, reStructuredText, source code, PDF
(pypdf), DOCX (its XML, read from the zip) and HTML (the standard library's parser).

``extract(name, data)`` returns an ``Extracted`` (text, type, language for code, title) or
raises ``Unreadable`` with a reason a user can act on (a corrupt PDF, a DOCX that is no
zip). The title is the first heading (Markdown, reStructuredText), the HTML <title>, the
PDF's or DOCX's own title, else the file name.
"""

from __future__ import annotations

import io
import logging
import re
import zipfile
from html.parser import HTMLParser
from xml.etree import ElementTree

import msgspec

MAX_TITLE_CHARS = 200

CODE = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript",
    ".cjs": "javascript", ".jsx": "javascript", ".ts": "typescript", ".tsx": "tsx",
    ".go": "go", ".rs": "rust", ".java": "java", ".c": "c", ".h": "c", ".cc": "cpp",
    ".cpp": "cpp", ".hpp": "cpp", ".cs": "csharp", ".rb": "ruby", ".php": "php",
    ".kt": "kotlin", ".swift": "swift", ".scala": "scala", ".sh": "shell", ".bash": "shell",
    ".lua": "lua", ".sql": "sql", ".r": "r", ".pl": "perl",
}
KINDS = {".md": "markdown", ".markdown": "markdown", ".rst": "rst", ".html": "html",
         ".htm": "html", ".pdf": "pdf", ".docx": "docx"}

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
DC_TITLE = "{http://purl.org/dc/elements/1.1/}title"
RST_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+.:_])\1{2,}\s*$")


class Extracted(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    type: str  # markdown, text, rst, code, pdf, docx, html
    title: str
    language: str = ""  # code: the lower-case language name


class Unreadable(Exception):
    """The file cannot be read as its type says; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def kind_of(name: str) -> tuple[str, str]:
    """(type, language) from the file name."""
    suffix = "." + name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if suffix in CODE:
        return "code", CODE[suffix]
    return KINDS.get(suffix, "text"), ""


def extract(name: str, data: bytes) -> Extracted:
    kind, language = kind_of(name)
    stem = name.rsplit("/", 1)[-1]
    if kind == "pdf":
        text, title = pdf_text(data)
    elif kind == "docx":
        text, title = docx_text(data)
    elif kind == "html":
        text, title = html_text(decode(data))
    else:
        text = decode(data)
        title = {"markdown": markdown_title, "rst": rst_title}.get(kind, no_title)(text)
    return Extracted(text=text, type=kind, language=language,
                     title=(title or stem).strip()[:MAX_TITLE_CHARS])


def decode(data: bytes) -> str:
    """UTF-8 (a BOM dropped), else Latin-1, which decodes any bytes."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def no_title(text: str) -> str:
    return ""


def markdown_title(text: str) -> str:
    for line in text.splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
            if heading:
                return heading
    return ""


def rst_title(text: str) -> str:
    """The first line underlined (and maybe overlined) with a punctuation character."""
    lines = text.splitlines()
    for above, below in zip(lines, lines[1:], strict=False):
        if above.strip() and not RST_UNDERLINE.match(above) and RST_UNDERLINE.match(below):
            return above.strip()
    return ""


def pdf_text(data: bytes) -> tuple[str, str]:
    from pypdf import PdfReader  # loaded only for PDFs
    from pypdf.errors import PyPdfError

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its warnings name no file
    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
        title = reader.metadata.title if reader.metadata else ""
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
        raise Unreadable("a corrupt or unreadable PDF") from exc
    return "\n\n".join(p.strip() for p in pages if p.strip()), str(title or "")


def docx_text(data: bytes) -> tuple[str, str]:
    """The paragraphs of word/document.xml, one per line; the title from docProps/core.xml."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            body = ElementTree.fromstring(archive.read("word/document.xml"))
            core = archive.read("docProps/core.xml") if "docProps/core.xml" in \
                archive.namelist() else b""
    except (zipfile.BadZipFile, KeyError, ElementTree.ParseError, OSError) as exc:
        raise Unreadable("a corrupt DOCX (not a Word document's zip)") from exc
    paragraphs = ["".join(t.text or "" for t in p.iter(W + "t")) for p in body.iter(W + "p")]
    title = ""
    if core:
        try:
            found = ElementTree.fromstring(core).find(DC_TITLE)
            title = found.text or "" if found is not None else ""
        except ElementTree.ParseError:
            title = ""
    return "\n".join(p for p in paragraphs if p.strip()), title


class _HtmlText(HTMLParser):
    BLOCKS = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre",
              "section", "article", "table", "ul", "ol", "blockquote", "title"}
    HIDDEN = {"script", "style", "template", "noscript"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: list[str] = []
        self.stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in self.HIDDEN or tag == "title":
            self.stack.append(tag)
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if self.stack and self.stack[-1] == tag:
            self.stack.pop()
        if tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if "title" in self.stack:
            self.title.append(data)
        elif not any(t in self.HIDDEN for t in self.stack):
            self.parts.append(data)


def html_text(markup: str) -> tuple[str, str]:
    parser = _HtmlText()
    parser.feed(markup)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line), " ".join("".join(parser.title).split())
