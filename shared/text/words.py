"""Words as the keyword signal counts them: runs of letters or digits of the lower-cased text
(services/query/keyword.py scores with them; workers store each chunk's count at ingest, BM25's
document length, so a search need not split the texts of its candidates again)."""

from __future__ import annotations

import functools
import re
import threading

import snowballstemmer

WORD = re.compile(r"[^\W_]+", re.UNICODE)


def count_words(text: str) -> int:
    """BM25's length of a chunk: the number of its words (lower-cased first, as the
    scoring does: lower-casing can change how a text splits)."""
    return sum(1 for _ in WORD.finditer(text.lower()))


# English function words: they match nearly everything and only add noise to TF-IDF
STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its itself
just me more most my myself no nor not now of off on once only or other our ours ourselves out
over own same she should so some such than that the their theirs them themselves then there
these they this those through to too under until up very was we were what when where which
while who whom why will with would you your yours yourself yourselves s t d ll m re ve
""".split())  # noqa: SIM905 - a word list reads better as text


def worth_matching(word: str) -> bool:
    """A word (lower case, from ``WORD``) the keyword signal matches: not a function word, and
    not one letter (one digit is)."""
    return word not in STOPWORDS and (len(word) > 1 or word.isdigit())


_STEMMERS = threading.local()  # a Snowball stemmer keeps its word in itself: one a thread


@functools.lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """The word's Snowball English stem, the stemmer of FalkorDB's full-text index
    (RediSearch's default language), so BM25 here counts the variants the index matched:
    "configured" and "configuration" are both "configur" on both sides."""
    stemmer = getattr(_STEMMERS, "english", None)
    if stemmer is None:
        stemmer = _STEMMERS.english = snowballstemmer.stemmer("english")
    return stemmer.stemWord(word)
