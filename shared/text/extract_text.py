"""The text of a file, by its type: Markdown, plain text, reStructuredText, source code, PDF
(pypdf), DOCX (its XML, read from the zip) and HTML (the standard library's parser).

``extract(name, data)`` returns an ``Extracted`` (text, type, language for code, title) or
raises ``Unreadable`` with a reason a user can act on (a corrupt PDF, a DOCX that is no
zip). The title is the first heading (Markdown, reStructuredText), the HTML <title>, the
PDF's or DOCX's own title, else the file name.

What is decompressed is bounded, never read past its limit (a small file can unpack to
gigabytes): a DOCX's XML parts as they stream out of the zip (``MAX_DOCX_XML_BYTES``,
parsed as they come, and with no DTD: Word writes none, and entities are how XML grows),
a PDF's streams one by one (pypdf's own limits, set here) and its pages' content in all
(``MAX_PDF_CONTENT_BYTES``). Past a limit the file is Unreadable, "too big: ...".
"""

from __future__ import annotations

import io
import logging
import re
import zipfile
import zlib
from html.parser import HTMLParser
from typing import IO, TYPE_CHECKING
from xml.parsers import expat

import msgspec

if TYPE_CHECKING:
    from pypdf import PdfReader

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

# expat's names with namespaces: "<uri>}<local name>"
W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
DC_TITLE = "http://purl.org/dc/elements/1.1/}title"
# A DOCX's word/document.xml, uncompressed. Word's markup around prose is a few bytes per
# character of text (a run and its properties around each change of format, a paragraph's
# properties); 64 MiB holds the XML of a text at one memory's limit, 10,000,000 characters,
# at 6.7 bytes each. Parsed as it streams, so memory follows the text, not the XML.
MAX_DOCX_XML_BYTES = 64 << 20
MAX_DOCX_CORE_BYTES = 1 << 20  # docProps/core.xml: the title and a dozen properties
XML_BLOCK = 1 << 16  # bytes decompressed and parsed at a time
# A PDF's pages' content (the drawing operators text is read from), uncompressed, over all
# its pages. pypdf parses it in Python at 0.19-0.36 MB/s (2026-11-27, this 2-core machine,
# a throwaway script under the heavy lock: 1 MB of text operators 2.75 s, 4 MB 21.1 s, 2.4 MB of
# words with positions 8.55 s), so 8 MiB is 25-45 s of a worker, inside a job's 120 s; a
# text page holds ~5-30 KB of it: some 280-1,700 pages
MAX_PDF_CONTENT_BYTES = 8 << 20
# pypdf's own limits (pypdf.Configuration), lower than its defaults of 75 MB a stream and
# 5,000 form invocations a page, which alone let one page take hours: a stream past the
# content bound above is too big anyway, and text forms are a few to a page
MAX_PDF_STREAM_BYTES = MAX_PDF_CONTENT_BYTES
MAX_PDF_FORMS_PER_PAGE = 64
PDF_LIMITS = {f"{kind}_maximum_output_length": MAX_PDF_STREAM_BYTES
              for kind in ("zlib", "lzw", "run_length", "brotli", "jbig2")} | {
    "array_based_stream_maximum_output_length": MAX_PDF_STREAM_BYTES,
    "xform_maximum_invocations_per_extraction": MAX_PDF_FORMS_PER_PAGE}
CORRUPT_DOCX = "a corrupt DOCX (not a Word document's zip)"
ZIP_ERRORS = (zipfile.BadZipFile, KeyError, OSError, EOFError, zlib.error,
              NotImplementedError, RuntimeError, expat.ExpatError)
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
        title = {"markdown": markdown_title, "rst": rst_title}.get(kind, lambda _: "")(text)
    return Extracted(text=text, type=kind, language=language,
                     title=(title or stem).strip()[:MAX_TITLE_CHARS])


def decode(data: bytes) -> str:
    """UTF-8 (a BOM dropped), else Latin-1, which decodes any bytes."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("latin-1")


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
    from pypdf import PdfReader, apply_configuration  # loaded only for PDFs
    from pypdf.errors import LimitReachedError, PyPdfError

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its warnings name no file
    try:
        with apply_configuration(**PDF_LIMITS):
            reader = PdfReader(io.BytesIO(data))
            pages = pdf_pages(reader)
            title = reader.metadata.title if reader.metadata else ""
    except LimitReachedError as exc:
        raise Unreadable("too big: a stream or a page of it is over the PDF reader's limits "
                         f"(such as {MAX_PDF_STREAM_BYTES:,} bytes a stream uncompressed, "
                         f"{MAX_PDF_FORMS_PER_PAGE} forms a page)") from exc
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
        raise Unreadable("a corrupt or unreadable PDF") from exc
    return "\n\n".join(p.strip() for p in pages if p.strip()), str(title or "")


def pdf_pages(reader: PdfReader) -> list[str]:
    """Each page's text, the pages' content (uncompressed) counted as they are read: past
    ``MAX_PDF_CONTENT_BYTES`` the file is too big (one stream drawn on every page counts on
    every page: it is decompressed and parsed for each)."""
    pages, content = [], 0
    for page in reader.pages:
        stream = page.get_contents()
        content += len(stream.get_data()) if stream is not None else 0
        if content > MAX_PDF_CONTENT_BYTES:
            raise Unreadable(f"too big: its pages hold over {MAX_PDF_CONTENT_BYTES:,} bytes of "
                             "content uncompressed")
        pages.append(page.extract_text() or "")
    return pages


def docx_text(data: bytes) -> tuple[str, str]:
    """The paragraphs of word/document.xml, one per line; the title from docProps/core.xml."""
    paragraphs: list[str] = []
    open_: list[list[str]] = []  # the texts of each paragraph open (a text box nests one)
    depth = [0]  # inside a w:t (its text is the document's)

    def start(name: str, attrs: dict) -> None:
        depth[0] += name == W + "t"
        if name == W + "p":
            open_.append([])

    def end(name: str) -> None:
        depth[0] -= name == W + "t"
        if name == W + "p" and open_:
            paragraphs.append("".join(open_.pop()))

    def text(data: str) -> None:
        if depth[0] and open_:
            open_[-1].append(data)

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            with archive.open("word/document.xml") as member:
                parse_xml(member, "word/document.xml", MAX_DOCX_XML_BYTES, start, end, text)
            title = docx_title(archive)
    except ZIP_ERRORS as exc:
        raise Unreadable(CORRUPT_DOCX) from exc
    return "\n".join(p for p in paragraphs if p.strip()), title


def docx_title(archive: zipfile.ZipFile) -> str:
    """dc:title of docProps/core.xml; '' when it has none, or cannot be read."""
    found: list[str] = []
    depth = [0]

    def start(name: str, attrs: dict) -> None:
        depth[0] += name == DC_TITLE

    def end(name: str) -> None:
        depth[0] -= name == DC_TITLE

    def text(data: str) -> None:
        if depth[0]:
            found.append(data)

    if "docProps/core.xml" not in archive.namelist():
        return ""
    try:
        with archive.open("docProps/core.xml") as member:
            parse_xml(member, "docProps/core.xml", MAX_DOCX_CORE_BYTES, start, end, text)
    except (*ZIP_ERRORS, Unreadable):
        return ""
    return "".join(found)


def parse_xml(stream: IO[bytes], name: str, limit: int, start, end, text) -> None:
    """Parse XML as it is decompressed, at most ``limit`` bytes of it (Unreadable past that,
    or when it declares a DTD), calling ``start(name, attributes)``, ``end(name)`` and
    ``text(characters)``."""
    parser = expat.ParserCreate(namespace_separator="}")
    parser.buffer_text = True

    def no_dtd(*_: object) -> None:
        raise Unreadable(f"a corrupt DOCX ({name} declares a DTD, which Word never writes)")

    parser.StartDoctypeDeclHandler = no_dtd
    parser.EntityDeclHandler = no_dtd
    parser.StartElementHandler, parser.EndElementHandler = start, end
    parser.CharacterDataHandler = text
    left = limit
    while block := stream.read(min(XML_BLOCK, left + 1)):
        left -= len(block)
        if left < 0:
            raise Unreadable(f"too big: its {name} is over {limit:,} bytes uncompressed")
        parser.Parse(block, False)
    parser.Parse(b"", True)


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
