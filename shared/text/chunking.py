"""Chunking: semantic-text-splitter sized in tokens of MiniLM's tokenizer (whichever model
embeds), with overlap, keeping each chunk's character offsets into the memory's text and the
lines they span.

A text of several paragraphs is cut at its paragraph breaks first (shared/text/paragraphs.py): a
run of paragraphs of ``paragraph_tokens`` or more that fits the budget is a chunk of its own,
so a chunk stands for one paragraph's topic instead of blending two or three; only a block
longer than the budget is split further, inside itself.

Source code (a memory whose metadata names a ``language`` in ``LANGUAGES``) is split with
``CodeSplitter`` on its tree-sitter syntax tree: a chunk ends where a function, class or
block ends whenever one fits, instead of in the middle of one. Anything else, an unknown
language included, goes through ``TextSplitter`` (paragraphs, sentences, words).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from typing import Any

import msgspec
import tree_sitter_go
import tree_sitter_java
import tree_sitter_javascript
import tree_sitter_python
import tree_sitter_rust
import tree_sitter_typescript
from semantic_text_splitter import CodeSplitter, TextSplitter
from tokenizers import Tokenizer

from zapomni.shared.embedding.embed_onnx import MAX_TOKENS, load_tokenizer
from zapomni.shared.protocol.jobs import ChunkSpan
from zapomni.shared.settings import Settings
from zapomni.shared.text.large_text import exact_counts, split_large
from zapomni.shared.text.paragraphs import PARAGRAPH_TOKENS, Pieces, split_blocks

SPECIAL_TOKENS = 2  # [CLS] and [SEP] are added on top of the chunk when it is embedded
# characters from which a text is split by characters first (shared/text/large_text.py): the
# token splitter takes ~8 s a MB here, the character split and word counts ~0.5 s
LARGE_TEXT = 200_000
# chunks overlap by an eighth of their size: 32 tokens of the default 256
OVERLAP_SHARE = 8

# metadata "language" -> the grammar's loader (the PyPI grammar packages, MIT)
LANGUAGES: dict[str, Callable[[], Any]] = {
    "python": tree_sitter_python.language,
    "javascript": tree_sitter_javascript.language,
    "typescript": tree_sitter_typescript.language_typescript,
    "tsx": tree_sitter_typescript.language_tsx,
    "go": tree_sitter_go.language,
    "rust": tree_sitter_rust.language,
    "java": tree_sitter_java.language,
}
ALIASES = {"py": "python", "js": "javascript", "jsx": "javascript", "mjs": "javascript",
           "cjs": "javascript", "ts": "typescript", "golang": "go", "rs": "rust"}
_NEWLINE = re.compile("\n")
_decode_json = msgspec.json.Decoder().decode


def chunk_budget(settings: Settings) -> int:
    """Chunk size in tokens: the setting, but never more than the in-process model reads
    (it would silently embed only the first 256 tokens of a longer chunk)."""
    if settings.ollama_url:
        return settings.chunk_tokens
    return min(settings.chunk_tokens, MAX_TOKENS)


def chunker_for(settings: Settings) -> Chunker:
    """The chunker the settings ask for (a worker builds one at start-up)."""
    budget = chunk_budget(settings)
    return Chunker(budget, budget // OVERLAP_SHARE)


def code_language(metadata_json: str) -> str:
    """The grammar a memory's metadata (as JSON) asks for: see metadata_language."""
    try:
        return metadata_language(_decode_json(metadata_json))
    except msgspec.DecodeError:
        return ""


def metadata_language(metadata: object) -> str:
    """The grammar a memory's metadata asks for ("language", any case, or a usual file
    extension such as "py"), or "" when it names none the workers know."""
    language = metadata.get("language") if isinstance(metadata, dict) else None
    if not isinstance(language, str):
        return ""
    language = language.strip().lower()
    language = ALIASES.get(language, language)
    return language if language in LANGUAGES else ""


class Chunker:
    """A loaded tokenizer and the splitters built on it: one for text and one per language
    (Rust objects, built once at start-up and reused by every job)."""

    def __init__(self, chunk_tokens: int, overlap: int,
                 paragraph_tokens: int = PARAGRAPH_TOKENS) -> None:
        """``paragraph_tokens``: the tokens from which a run of paragraphs is a chunk of its
        own (at most half the budget)."""
        capacity = max(8, chunk_tokens - SPECIAL_TOKENS)
        overlap = max(0, min(overlap, capacity // 2 - 1))  # must stay below the minimum size
        self.tokenizer: Tokenizer = load_tokenizer()
        self.capacity = capacity
        sizing = (capacity // 2, capacity)
        self.overlap = overlap
        self.paragraph_tokens = max(1, min(paragraph_tokens, capacity // 2))
        self._splitter = TextSplitter.from_huggingface_tokenizer(
            self.tokenizer, sizing, overlap=overlap, trim=True)
        self._code = {
            name: CodeSplitter.from_huggingface_tokenizer(
                grammar(), self.tokenizer, sizing, overlap=overlap, trim=True)
            for name, grammar in LANGUAGES.items()
        }

    def split(self, text: str, language: str = "",
              progress: Callable[[float], None] | None = None,
              line_offset: int = 0) -> list[ChunkSpan]:
        """``language``: a key of LANGUAGES (see code_language); anything else is text, and a
        text of LARGE_TEXT characters or more is split by characters first (fast), telling
        ``progress`` the share done as it goes."""
        splitter = self._code.get(language)
        if splitter is not None:
            pieces = splitter.chunk_indices(text)
            counts = self.count(pieces)
        elif len(text) >= LARGE_TEXT:
            pieces, counts = split_large(text, self.tokenizer, self.capacity, self.overlap,
                                         self._splitter, progress, self.paragraph_tokens)
        else:
            pieces, counts = self.split_text(text)
        lines = Lines(text, line_offset)
        spans = []
        for i, ((start, piece), tokens) in enumerate(zip(pieces, counts, strict=True)):
            end = start + len(piece)
            first, last = lines.span(start, end)
            spans.append(ChunkSpan(idx=i, text=piece, char_start=start, char_end=end,
                                   tokens=tokens, start_line=first, end_line=last))
        return spans

    def split_text(self, text: str) -> tuple[Pieces, list[int]]:
        """(start, chunk) pieces of a text (not code) and their tokens: blocks of paragraphs
        (shared/text/paragraphs.py), those over the budget split by the token splitter."""
        return split_blocks(text, self._splitter, self.count, self.paragraph_tokens,
                            self.capacity)

    def count(self, pieces: Pieces) -> list[int]:
        """Tokens of each piece, without [CLS] and [SEP]."""
        return exact_counts(pieces, self.tokenizer)


class Lines:
    """Where a text's lines start: the 1-based line of any character offset, counted after
    the ``line_offset`` blank lines stripped from the front of the text as sent."""

    def __init__(self, text: str, line_offset: int = 0) -> None:
        self._newlines = [m.start() for m in _NEWLINE.finditer(text)]
        self._offset = line_offset

    def line_of(self, offset: int) -> int:
        return bisect.bisect_left(self._newlines, offset) + 1 + self._offset

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The first and last line (inclusive) of the characters ``start:end``."""
        return self.line_of(start), self.line_of(max(start, end - 1))
