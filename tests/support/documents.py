"""Tiny PDF and DOCX files made here, for the extraction tests (no binary files committed)."""

from __future__ import annotations

import io
import zipfile
import zlib


def make_pdf(lines: list[str], title: str) -> bytes:
    """A one-page PDF 1.4 with ``lines`` in Helvetica and ``title`` in its Info."""
    text = " ".join(f"({line}) Tj 0 -20 Td" for line in lines)
    stream = f"BT /F1 12 Tf 20 120 Td {text} ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 400 144] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        f"<< /Title ({title}) >>".encode(),
    ]
    return _pdf(objects, b" /Info 6 0 R")


def _pdf(objects: list[bytes], info: bytes) -> bytes:
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out.write(b"".join(b"%010d 00000 n \n" % offset for offset in offsets))
    out.write(b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n"
              % (len(objects) + 1, info, xref))
    return out.getvalue()


def make_pdf_drawn_on(pages: int, content: bytes) -> bytes:
    """A PDF of ``pages`` pages that all draw one content stream, ``content`` deflated: a
    small file whose pages unpack to ``pages`` times the content."""
    packed = zlib.compress(content, 9)
    kids = " ".join(f"{4 + i} 0 R" for i in range(pages))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>".encode(),
               b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(packed) + packed
               + b"\nendstream"]
    objects += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 400 144] /Contents 3 0 R >>"
                ] * pages
    return _pdf(objects, b"")


W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def make_docx(paragraphs: list[str], title: str) -> bytes:
    """A minimal Word document: the parts a reader needs, with ``title`` in its core
    properties."""
    body = "".join(f"<w:p><w:r><w:t>{p}</w:t></w:r></w:p>" for p in paragraphs)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", (
            '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/'
            '2006/content-types"><Override PartName="/word/document.xml" ContentType='
            '"application/vnd.openxmlformats-officedocument.wordprocessingml.document.main'
            '+xml"/></Types>'))
        archive.writestr("word/document.xml", f'<?xml version="1.0"?><w:document '
                                              f'xmlns:w="{W}"><w:body>{body}</w:body>'
                                              '</w:document>')
        archive.writestr("docProps/core.xml", (
            '<?xml version="1.0"?><cp:coreProperties xmlns:cp="http://schemas.openxmlformats'
            '.org/package/2006/metadata/core-properties" xmlns:dc="http://purl.org/dc/'
            f'elements/1.1/"><dc:title>{title}</dc:title></cp:coreProperties>'))
    return out.getvalue()
