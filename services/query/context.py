"""A thread's turns (get_history) and the context for the next answer (build_context).
Read-only.

build_context reads the thread's last turns and searches for the query at once, leaves out of
the matches the turns the history already holds, and fits the rest into ``token_budget``
(tokens of TOKENIZER's tokenizer, below): the current message always, then the
memories best first (each that fits: a long one is passed over for a shorter next one), then
the turns newest first into what is left. So over the budget the oldest turns go first, then
the lowest-ranked memories, and nothing is cut in the middle; a turn the budget
leaves out of the history competes with the other memories by its rank in the search
(fit_competing), so the turn that says the user's name survives a small budget where the
newest small talk does not. ``prompt`` is the three sections as text (memories, then the
conversation leading into the current message), each line with its speaker ("User: ...")
when the metadata names a role, each memory with a short label (``label``): the day it
happened (event time), its metadata memory_type when it has one, "outdated" when a newer
statement of the same thing was found, and the ids only when the caller asks (``show_ids``):
an id costs ~30 tokens, the rest ~7, and an agent has the ids in ``memories`` anyway;
``total_tokens`` is the count of that text as returned.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import msgspec
from tokenizers import Tokenizer

from zapomni.services.query.rank import AccessLog
from zapomni.services.query.search import search_memory
from zapomni.shared.embedding.embed import Embedder
from zapomni.shared.embedding.embed_onnx import load_tokenizer
from zapomni.shared.protocol.answers import (
    Context,
    ContextInfo,
    ContextMemory,
    History,
    SearchHit,
    Turn,
)
from zapomni.shared.protocol.api import ContextRequest, HistoryRequest, SearchRequest
from zapomni.shared.protocol.errors import InvalidInput
from zapomni.shared.protocol.times import iso_time
from zapomni.shared.settings import Settings
from zapomni.shared.store import cypher_lists, cypher_search
from zapomni.shared.store.graphstore import GraphStore, namespace_exists, run
from zapomni.shared.text.conversation import encode_cursor

# the tokenizer build_context counts its budget in (here, not in shared/text: the front
# validates get_context without loading the model's runtime)
TOKENIZER = "sentence-transformers/all-MiniLM-L6-v2"  # its WordPiece (bert-base-uncased)


class TokenCounter:
    """The loaded tokenizer (a Rust object, reused): counts without special tokens, so the
    count of lines joined by newlines is the sum of their counts."""

    name = TOKENIZER

    def __init__(self) -> None:
        self._tokenizer: Tokenizer = load_tokenizer()

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)



_decode_json = msgspec.json.Decoder().decode
# how the memories of a context are ranked (search's rank). "memory" (relevance blended with
# recency, use and importance) was chosen on 2026-11-23 so that a changed fact kept in a
# thread beside the old one ranked above it; since issue 32 currency does that for every rank
# (docs/benchmarks.md, "Time and currency"), and recency reads event time: with "memory", a
# name said in March lost to last week's small talk at 150 tokens (2026-11-27, the new-user
# trial; tests/integration/test_context_roles.py). LoCoMo's contexts hold the same evidence
# either way (every turn there is equally recent and unused)
RANK = "relevance"
HISTORY_CHARS = 10_000  # a turn's text in get_history; longer ones are cut (get_memory: all)
CONTEXT_TURN_CHARS = 2_000  # and in a context: a turn, not a document
MEMORIES = "## Relevant memories"
CONVERSATION = "## Recent conversation"
CURRENT = "## Current message"
ROLES = {"user": "User", "assistant": "Assistant", "system": "System", "tool": "Tool"}
REFITS = 3  # fit_competing's steps at most


async def read_history(store: GraphStore, request: HistoryRequest) -> History:
    turns, oldest = await thread_turns(store, request.namespace, request.thread, request.limit,
                                       (request.before_us, request.before_cu,
                                        request.before_id), HISTORY_CHARS)
    return History(namespace=request.namespace, thread=request.thread, turns=turns,
                   next_before=encode_cursor(*oldest) if oldest else None)


async def thread_turns(store: GraphStore, namespace: str, thread: str, limit: int,
                       before: tuple[int | None, int, str], chars: int
                       ) -> tuple[list[Turn], tuple[int, int, str] | None]:
    """The newest ``limit`` turns before ``before``, oldest first, and where they begin if
    older turns exist (the cursor of the next page), else None. One more row than asked
    says whether there are older ones; the store sorts and cuts, so only a page is read."""
    if not await namespace_exists(store, namespace):
        return [], None
    rows = await run(store.graph(namespace), cypher_lists.THREAD_TURNS, {
        "thread": thread, "limit": limit + 1, "chars": chars, "before_us": before[0],
        "before_cu": before[1], "before_id": before[2], **cypher_search.visible_params()},
        read_only=True)
    page = rows[:limit][::-1]
    oldest = (int(page[0][7]), int(page[0][8]), page[0][0]) if len(rows) > limit else None
    return [shape_turn(row, chars) for row in page], oldest


def shape_turn(row: list[Any], chars: int) -> Turn:
    memory_id, text, size, metadata, created, memory_type, importance, _, _, occurred = row
    cut = int(size or 0) > chars
    meta = _decode_json(metadata or "{}")
    role = meta.get("role")
    return Turn(memory_id=memory_id, text=f"{text.rstrip()} …" if cut else text,
                metadata=meta, created_at=iso_time(created), occurred_at=iso_time(occurred),
                role=role if isinstance(role, str) else None,
                memory_type=memory_type or None,
                importance=None if importance is None else float(importance), truncated=cut)


async def build_context(store: GraphStore, embedder: Embedder, redis, settings: Settings,
                        counter: TokenCounter, request: ContextRequest, *,
                        access: AccessLog | None = None) -> Context:
    """``access``: where to note the memories the context holds (services/query/rank.py)."""
    context = await gather_context(store, embedder, redis, settings, counter, request)
    if access is not None and context.memories:
        access.record(request.namespace, [m.memory_id for m in context.memories])
    return context


async def gather_context(store: GraphStore, embedder: Embedder, redis, settings: Settings,
                         counter: TokenCounter, request: ContextRequest) -> Context:
    current = f"{CURRENT}\n{request.query}"
    needed = counter.count(current)
    if needed > request.token_budget:
        raise InvalidInput(
            f"token_budget: {request.token_budget:,} tokens cannot hold the current message "
            f"({needed:,} tokens with its heading, {counter.name} tokenizer); raise "
            "token_budget or shorten the query")
    turns, hits = await asyncio.gather(recent_turns(store, request),
                                       matches(store, embedder, redis, settings, request))
    memories = others(hits, turns, request.memories)
    if len(memories) < request.memories and len(hits) == search_limit(request) \
            < search_limit(request, widest=True):
        # more turns of the history matched than the first ask allowed for: ask for all
        hits = await matches(store, embedder, redis, settings, request, widest=True)
        memories = others(hits, turns, request.memories)
    return fit_competing(request, turns, hits, memories, counter, current, needed)


def fit_competing(request: ContextRequest, turns: list[Turn], hits: list[SearchHit],
                  memories: list[ContextMemory], counter: TokenCounter, current: str,
                  spent: int) -> Context:
    """``fit``; then, while the budget leaves turns of the history out, those turns compete
    with the other memories by their rank in the search (a turn the memories show is not
    repeated in the history), so what the question is about is kept rather than the
    newest small talk. Each step is fitted whole; three steps at most."""
    context = fit(request, turns, memories, counter, current, spent)
    for _ in range(REFITS):
        kept = {turn.memory_id for turn in context.history}
        if len(kept) == len(turns):
            break
        competing = others(hits, [t for t in turns if t.memory_id in kept], request.memories)
        if [m.memory_id for m in competing] == [m.memory_id for m in memories]:
            break
        memories = competing
        shown = {m.memory_id for m in memories}
        context = fit(request, [t for t in turns if t.memory_id not in shown], memories,
                      counter, current, spent)
    return context


def others(hits: list[SearchHit], turns: list[Turn], count: int) -> list[ContextMemory]:
    """The best ``count`` matches that are not turns of the history."""
    held = {turn.memory_id for turn in turns}
    return [context_memory(hit) for hit in hits if hit.memory_id not in held][:count]


async def recent_turns(store: GraphStore, request: ContextRequest) -> list[Turn]:
    if request.thread is None or not request.history_turns:
        return []
    turns, _ = await thread_turns(store, request.namespace, request.thread,
                                  request.history_turns, (None, 0, ""), CONTEXT_TURN_CHARS)
    return turns


def search_limit(request: ContextRequest, widest: bool = False) -> int:
    """How many passages to ask search for: ``memories`` and as many again for turns of the
    history that may be among them (the search then costs what a plain one does: its depth
    is max(3 x limit, 50)); ``widest``: enough for every turn of the history."""
    spare = request.history_turns if request.thread is not None else 0
    return min(100, request.memories + (spare if widest else min(spare, request.memories)))


async def matches(store: GraphStore, embedder: Embedder, redis, settings: Settings,
                  request: ContextRequest, widest: bool = False) -> list[SearchHit]:
    if not request.memories:
        return []
    search = SearchRequest(query=request.query, namespace=request.namespace,
                           limit=search_limit(request, widest), rank=RANK,
                           filters=request.filters, as_of=request.as_of)
    return (await search_memory(store, embedder, redis, settings, search)).results


def context_memory(hit: SearchHit) -> ContextMemory:
    kind = hit.metadata.get("memory_type")
    return ContextMemory(memory_id=hit.memory_id, text=hit.text, score=hit.score, why=hit.why,
                         metadata=hit.metadata, created_at=hit.created_at,
                         memory_type=kind if isinstance(kind, str) and kind else "note",
                         status=hit.status, parts=hit.parts, occurred_at=hit.occurred_at,
                         outdated_by=hit.outdated_by)


def one_line(text: str) -> str:
    """One item per line in the prompt: a passage's own line breaks are spaces there (the
    token count is the same: whitespace is no token)."""
    return " ".join(text.split())


def spoken(text: str, role: Any) -> str:
    """A line as its speaker said it ("User: ...") when the metadata names the role."""
    return f"{ROLES[role]}: {one_line(text)}" if role in ROLES else one_line(text)


def short_day(moment: str) -> str:
    """An ISO-8601 time as the day a model reads cheaply: "8 Sep 2026" (4 tokens of the
    WordPiece against 6 for 2026-09-08)."""
    try:
        day = datetime.fromisoformat(moment)
    except ValueError:
        return moment[:10]
    return f"{day.day} {day:%b %Y}"


def label(memory: ContextMemory, show_ids: bool = False) -> str:
    """What the prompt says of a memory before its text: its day, its memory_type when the
    metadata gives one, "outdated" when a newer statement of the same thing was found; with
    ``show_ids``, its id first and the newer one's after "outdated by". ~7 tokens without
    ids; each id is ~30."""
    kind = memory.metadata.get("memory_type")
    parts = [memory.memory_id] if show_ids else []
    if memory.occurred_at:
        parts.append(short_day(memory.occurred_at))
    if isinstance(kind, str) and kind:
        parts.append(kind)
    if memory.outdated_by:
        parts.append(f"outdated by {memory.outdated_by}" if show_ids else "outdated")
    return f"[{' | '.join(parts)}]" if parts else ""


def memory_line(memory: ContextMemory, show_ids: bool = False) -> str:
    tag = label(memory, show_ids)
    said = spoken(memory.text, memory.metadata.get("role"))
    return f"- {tag} {said}" if tag else f"- {said}"


def fit(request: ContextRequest, turns: list[Turn], memories: list[ContextMemory],
        counter: TokenCounter, current: str, spent: int) -> Context:
    """What fits the budget, and the prompt made of it: the memories best first, each that
    fits (one too long for the room left is passed over for the next: the budget holds
    facts, not a gap), then the turns newest first while they fit (the history stays one
    run up to the current message). Lines are counted one at a time, in the order they are
    tried, and no more once no line could fit: counting costs about the lines read, not
    the whole text. Whitespace is no token, so the prompt's count is the sum of its parts."""
    room = request.token_budget - spent
    candidates = [memory_line(m, request.show_ids) for m in memories]
    chosen, used = fill(candidates, MEMORIES, room, counter, passing=True)
    newest = [spoken(t.text, t.role) for t in reversed(turns)]
    heard, told = fill(newest, CONVERSATION, room - used, counter, passing=False)
    said = newest[:len(heard)][::-1]
    start = len(turns) - len(said)
    kept = [memories[i] for i in chosen]
    return Context(
        namespace=request.namespace, thread=request.thread, history=turns[start:],
        memories=kept, latest_message=request.query,
        prompt=assemble([candidates[i] for i in chosen], said, current),
        metadata=ContextInfo(history_count=len(said), memory_count=len(kept),
                             total_tokens=spent + used + told,
                             truncated=start > 0 or len(kept) < len(memories),
                             tokenizer=counter.name, token_budget=request.token_budget))


def fill(lines: list[str], heading: str, room: int, counter: TokenCounter, passing: bool
         ) -> tuple[list[int], int]:
    """The positions of the ``lines`` kept in ``room`` under their heading, and the tokens
    they take with it (0 when none is kept). ``passing``: a line that does not fit is
    passed over for the next (a memory's line costs a token at least, "-": once the room is
    spent nothing more is counted); else the first that does not fit ends the run."""
    spent, kept = counter.count(heading) if lines else 0, []
    for at, line in enumerate(lines):
        if passing and spent >= room:
            break
        cost = counter.count(line)
        if spent + cost > room:
            if passing:
                continue
            break
        kept.append(at)
        spent += cost
    return kept, spent if kept else 0


def assemble(memory_lines: list[str], turn_lines: list[str], current: str) -> str:
    sections = []
    if memory_lines:
        sections.append("\n".join([MEMORIES, *memory_lines]))
    if turn_lines:
        sections.append("\n".join([CONVERSATION, *turn_lines]))
    return "\n\n".join([*sections, current])
