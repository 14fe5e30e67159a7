"""A thread's turns (get_history) and the context for the next answer (build_context).
Read-only.

build_context reads the thread's last turns and searches for the query at once, leaves out of
the matches the turns the history already holds, and fits the rest into ``token_budget``
(tokens of shared/conversation.py's tokenizer): the current message always, then the
memories best first, then the turns newest first. So over the budget the oldest turns go
first, then the lowest-ranked memories, and nothing is cut in the middle. ``prompt`` is the
three sections as text (memories, then the conversation leading into the current message);
``total_tokens`` is the count of that text as returned.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from services.query.search import iso_time, search_memory
from shared import cypher
from shared.conversation import TokenCounter, encode_cursor
from shared.embed import Embedder
from shared.errors import InvalidInput
from shared.graphstore import GraphStore, namespace_exists, run
from shared.messages import (
    Context,
    ContextInfo,
    ContextMemory,
    ContextRequest,
    History,
    HistoryRequest,
    SearchHit,
    SearchRequest,
    Turn,
)
from shared.settings import Settings

_decode_json = msgspec.json.Decoder().decode
# how the memories of a context are ranked: search's default. rank="memory" (relevance
# blended with recency, use and importance) is a search option of issue 17; switch here
RANK = "relevance"
HISTORY_CHARS = 10_000  # a turn's text in get_history; longer ones are cut (get_memory: all)
CONTEXT_TURN_CHARS = 2_000  # and in a context: a turn, not a document
MEMORIES = "## Relevant memories"
CONVERSATION = "## Recent conversation"
CURRENT = "## Current message"


async def read_history(store: GraphStore, request: HistoryRequest) -> History:
    turns, oldest = await thread_turns(store, request.namespace, request.thread, request.limit,
                                       (request.before_us, request.before_id), HISTORY_CHARS)
    return History(namespace=request.namespace, thread=request.thread, turns=turns,
                   next_before=encode_cursor(*oldest) if oldest else None)


async def thread_turns(store: GraphStore, namespace: str, thread: str, limit: int,
                       before: tuple[int | None, str], chars: int
                       ) -> tuple[list[Turn], tuple[int, str] | None]:
    """The newest ``limit`` turns before ``before``, oldest first, and where they begin if
    older turns exist (the cursor of the next page), else None. One more row than asked
    says whether there are older ones; the store sorts and cuts, so only a page is read."""
    if not await namespace_exists(store, namespace):
        return [], None
    rows = await run(store.graph(namespace), cypher.THREAD_TURNS, {
        "thread": thread, "limit": limit + 1, "chars": chars, "before_us": before[0],
        "before_id": before[1], **cypher.visible_params()}, read_only=True)
    page = rows[:limit][::-1]
    oldest = (int(page[0][7]), page[0][0]) if len(rows) > limit else None
    return [shape_turn(row, chars) for row in page], oldest


def shape_turn(row: list[Any], chars: int) -> Turn:
    memory_id, text, size, metadata, created, memory_type, importance, _ = row
    cut = int(size or 0) > chars
    return Turn(memory_id=memory_id, text=f"{text.rstrip()} …" if cut else text,
                metadata=_decode_json(metadata or "{}"), created_at=iso_time(created),
                memory_type=memory_type or None,
                importance=None if importance is None else float(importance), truncated=cut)


async def build_context(store: GraphStore, embedder: Embedder, redis, settings: Settings,
                        counter: TokenCounter, request: ContextRequest) -> Context:
    current = f"{CURRENT}\n{request.query}"
    room = request.token_budget - counter.count(current)
    if room < 0:
        raise InvalidInput(
            f"token_budget: {request.token_budget:,} tokens cannot hold the current message "
            f"({request.token_budget - room:,} tokens with its heading, {counter.name} "
            "tokenizer); raise token_budget or shorten the query")
    turns, hits = await asyncio.gather(recent_turns(store, request),
                                       matches(store, embedder, redis, settings, request))
    held = {turn.memory_id for turn in turns}
    memories = [context_memory(hit) for hit in hits if hit.memory_id not in held]
    return fit(request, turns, memories[:request.memories], counter, current)


async def recent_turns(store: GraphStore, request: ContextRequest) -> list[Turn]:
    if request.thread is None or not request.history_turns:
        return []
    turns, _ = await thread_turns(store, request.namespace, request.thread,
                                  request.history_turns, (None, ""), CONTEXT_TURN_CHARS)
    return turns


async def matches(store: GraphStore, embedder: Embedder, redis, settings: Settings,
                  request: ContextRequest) -> list[SearchHit]:
    """The query's best passages: enough that ``memories`` remain once the turns of the
    history (at most ``history_turns`` of them) are left out."""
    if not request.memories:
        return []
    spare = request.history_turns if request.thread is not None else 0
    search = SearchRequest(query=request.query, namespace=request.namespace,
                           limit=min(100, request.memories + spare))
    return (await search_memory(store, embedder, redis, settings, search)).results


def context_memory(hit: SearchHit) -> ContextMemory:
    kind = hit.metadata.get("memory_type")
    return ContextMemory(memory_id=hit.memory_id, text=hit.text, score=hit.score, why=hit.why,
                         metadata=hit.metadata, created_at=hit.created_at,
                         memory_type=kind if isinstance(kind, str) and kind else "note")


def one_line(text: str) -> str:
    """One item per line in the prompt: a passage's own line breaks are spaces there (the
    token count is the same: whitespace is no token)."""
    return " ".join(text.split())


def memory_line(memory: ContextMemory) -> str:
    return (f"- [{memory.memory_id} | {memory.memory_type} | {memory.created_at[:10]}] "
            f"{one_line(memory.text)}")


def fit(request: ContextRequest, turns: list[Turn], memories: list[ContextMemory],
        counter: TokenCounter, current: str) -> Context:
    """What fits the budget, and the prompt made of it."""
    lines = [memory_line(m) for m in memories]
    said = [one_line(t.text) for t in turns]
    counts = counter.count_each([current, MEMORIES, CONVERSATION, *lines, *said])
    room = request.token_budget - counts[0]
    kept, spent = take(counts[3:3 + len(lines)], counts[1], room)
    # turns go before memories: while a memory is left out, so is every turn
    heard = take(counts[3 + len(lines):][::-1], counts[2], room - spent)[0] \
        if kept == len(lines) else 0
    start = len(said) - heard
    prompt = assemble(lines[:kept], said[start:], current)
    total = counter.count(prompt)
    while total > request.token_budget:  # the counts add up; this only guards that they do
        start, kept = (start + 1, kept) if start < len(said) else (start, kept - 1)
        prompt = assemble(lines[:kept], said[start:], current)
        total = counter.count(prompt)
    return Context(
        namespace=request.namespace, thread=request.thread, history=turns[start:],
        memories=memories[:kept], latest_message=request.query, prompt=prompt,
        metadata=ContextInfo(history_count=len(said) - start, memory_count=kept,
                             total_tokens=total, truncated=start > 0 or kept < len(lines),
                             tokenizer=counter.name, token_budget=request.token_budget))


def take(costs: list[int], heading: int, room: int) -> tuple[int, int]:
    """How many of ``costs`` (in order) fit in ``room`` under their heading, and the tokens
    they spend with it."""
    spent = heading
    for count, cost in enumerate(costs):
        if spent + cost > room:
            return count, spent if count else 0
        spent += cost
    return len(costs), spent if costs else 0


def assemble(memory_lines: list[str], turn_lines: list[str], current: str) -> str:
    sections = []
    if memory_lines:
        sections.append("\n".join([MEMORIES, *memory_lines]))
    if turn_lines:
        sections.append("\n".join([CONVERSATION, *turn_lines]))
    return "\n\n".join([*sections, current])
