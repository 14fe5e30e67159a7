"""Words as the keyword signal counts them: runs of letters or digits of the lower-cased text
(services/query/keyword.py scores with them; workers store each chunk's count at ingest, BM25's
document length, so a search need not split the texts of its candidates again)."""

from __future__ import annotations

import re

WORD = re.compile(r"[^\W_]+", re.UNICODE)


def count_words(text: str) -> int:
    """BM25's length of a chunk: the number of its words (lower-cased first, as the
    scoring does: lower-casing can change how a text splits)."""
    return sum(1 for _ in WORD.finditer(text.lower()))
