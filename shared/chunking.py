"""Chunking: semantic-text-splitter sized in tokens of the embedder's tokenizer, with overlap,
keeping each chunk's character offsets into the memory's text."""

from __future__ import annotations

from semantic_text_splitter import TextSplitter
from tokenizers import Tokenizer

from zapomni.shared.embed_onnx import MAX_TOKENS, load_tokenizer
from zapomni.shared.messages import ChunkSpan
from zapomni.shared.settings import Settings

SPECIAL_TOKENS = 2  # [CLS] and [SEP] are added on top of the chunk when it is embedded


def chunk_budget(settings: Settings) -> int:
    """Chunk size in tokens: the setting, but never more than the in-process model reads
    (it would silently embed only the first 256 tokens of a longer chunk)."""
    if settings.ollama_url:
        return settings.chunk_tokens
    return min(settings.chunk_tokens, MAX_TOKENS)


class Chunker:
    """A loaded tokenizer and the splitter built on it (both are Rust objects, reused)."""

    def __init__(self, chunk_tokens: int, overlap: int) -> None:
        capacity = max(8, chunk_tokens - SPECIAL_TOKENS)
        overlap = max(0, min(overlap, capacity // 2 - 1))  # must stay below the minimum size
        self.tokenizer: Tokenizer = load_tokenizer()
        self.capacity = capacity
        self._splitter = TextSplitter.from_huggingface_tokenizer(
            self.tokenizer, (capacity // 2, capacity), overlap=overlap, trim=True
        )

    def split(self, text: str) -> list[ChunkSpan]:
        pieces = self._splitter.chunk_indices(text)
        counts = self.tokenizer.encode_batch([p for _, p in pieces], add_special_tokens=False)
        return [
            ChunkSpan(idx=i, text=piece, char_start=start, char_end=start + len(piece),
                      tokens=len(enc.ids))
            for i, ((start, piece), enc) in enumerate(zip(pieces, counts, strict=True))
        ]
