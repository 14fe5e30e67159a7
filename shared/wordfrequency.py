"""How common an English word is, from wordfreq's frequency list (wordfreq 3.1.1: code
Apache-2.0, word lists CC-BY-SA 4.0, read as they are installed, never copied here).

The entity rules on technical text (shared/nertext.py) ask it two things the small spaCy
model cannot tell: whether a capitalised word is an everyday word (``Queue``, ``License``,
``Returns True``: common) and whether a CamelCase word is in general use at all (``GitHub``,
``JavaScript``: known) or is an identifier nobody writes outside code (``EventLoop``,
``ConfigParser``: not known). wordfreq folds case, so ``Python`` and ``Windows`` are as
common as ``python`` and ``windows``: on technical text they are not shown (the cost of a
rule that shows few wrong names; docs/benchmarks.md, "Knowledge graph").
"""

from __future__ import annotations

from functools import lru_cache

from wordfreq import zipf_frequency

# Zipf scale: log10 of occurrences per billion words. 3.5 is about 3 in a million words:
# "queue" 3.8, "syntax" 3.5, "bootstrap" 2.9, "debian" 2.9
COMMON = 3.5
# a word this frequent after a rare one is the next word of the text run into a name
# ("Peter Hutterer Date", "Solaris Require"): "date" 5.2, "require" 4.8
EVERYDAY = 4.5


@lru_cache(maxsize=65_536)
def zipf(word: str) -> float:
    """How often ``word`` (any case) occurs in English on the Zipf scale; 0 if never seen."""
    return zipf_frequency(word, "en")


def common(word: str) -> bool:
    return zipf(word) >= COMMON


def everyday(word: str) -> bool:
    return zipf(word) >= EVERYDAY


def known(word: str) -> bool:
    """Whether wordfreq has seen ``word`` at all (it lists words down to Zipf 1)."""
    return zipf(word) > 0
