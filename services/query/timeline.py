"""Event time in search: the time words of a question as a soft prior over when memories
happened, and the newer of two statements about the same thing first. Read-only.

The prior (``time_prior``): a question that names a window ("last week", "in March": see
services/query/when.py) raises each candidate by TIME_WEIGHT of its score times how well its
event time fits the window (1 inside, halving every half-width outside). A question that says
nothing but its time ("What did I do last week?") is asked about the window: there the fit
decides ALONE_WEIGHT of the score and relevance the rest. It only re-orders: nothing is left
out, so a window with no memory in it still returns the best matches. ``why.time`` shows the
words, the window and the points added (or taken). The words of a relative window ("last",
"week", "ago") are the question's time, not words a passage should match (``time_terms``).

Currency (``newer_first``): statements (memories said by a ``role`` or in a ``thread``: a
conversation's turns, not documents) that state different values for the same thing ("I live
in Kraków" ... "I moved to Gdańsk") are found among the best TOP results without an LLM:

- the same subject (``subject_of``): said by the same role and the same speaker named in the
  text ("[date] Caroline: ..."), and both in the first person, or both starting with the same
  name ("Mira lives in Lisbon" / "Mira has moved to Porto"), or neither;
- close in meaning, different in content: the cosine of their passages' vectors is at
  least SIMILAR (SIMILAR_CHANGED when the newer one says something changed) and below
  RESTATED;
- a pair: each is the other's closest such statement on its side of time (the newer's
  closest older one, the older's closest newer one), so a fact changed twice is a chain and
  a statement about another thing of the same subject does not join it.

In each chain the statements are ordered by event time (then time added) over the places the
chain already holds: the newest first for a question about the present (``now``,
``currently``, ``latest``; a present-tense question without such words only where the newer
statement says that something changed: ``STRONG``), the oldest first for ``initially``,
``used to``, ``the first time``, ``before?``; a past-tense question is left as ranked. Every
older statement of a chain says ``outdated_by`` (the chain's newest) and ``why.currency``
(newer: that id; the newest names the one it follows with ``older``).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from falkordb.asyncio.graph import AsyncGraph

from zapomni.services.query.fusion import Candidate
from zapomni.services.query.keyword import terms
from zapomni.services.query.when import When, closeness
from zapomni.shared.protocol.answers import SignalMatch
from zapomni.shared.protocol.times import iso
from zapomni.shared.store import cypher_moves, cypher_search
from zapomni.shared.store.graphstore import run_cells

# a candidate in the window gains this share of its score (measured on LongMemEval-S dev's
# questions with time words: docs/benchmarks.md, "LongMemEval")
TIME_WEIGHT = 0.1
# a first-person question's candidates said by the user gain this share of their score (0:
# off; measured on LongMemEval-S dev by type: docs/benchmarks.md, "LongMemEval")
USER_WEIGHT = 0.0
TOP = 20  # the best distinct memories compared for currency
# cosine at or above which two statements of one subject may be about the same thing
# (MiniLM: "I live in Kraków." / "I moved to Gdańsk last month." 0.58; "Mira lives in
# Lisbon." / "Mira works at Orbitech." 0.62 is told apart by the pairing, not by this)
SIMILAR = 0.45
# ... and below which: closer than this, one says again what the other said (a restatement:
# "... in the morning" / "... in the mornings", 0.98), nothing changed
RESTATED = 0.95
# ... and at or above which, when the newer one says that something changed (CHANGED)
SIMILAR_CHANGED = 0.3
# a chain moves only where the statement it would put first is at least this share of the
# best placed one's cosine to the question (answering). Measured 2026-12-01 on ./dev bench
# currency, the chains its questions moved: 3 of 462 holding the fact asked about put a
# statement below 0.5 first (0.33, 0.33, 0.42: each a third statement the chain gained by a
# looser likeness, "... I drive a Honda now" after two about an instrument; 14 more the
# vector signal did not find move as before); issue 51's chat, the move to Gdańsk for "What
# is my job now?": 0.35. With it the bench's now-first 0.821 -> 0.825, initially-first 0.915,
# LoCoMo every mode unchanged (docs/benchmarks.md, "Issue 51")
ANSWERS = 0.5
CHANGED = re.compile(r"\b(now|moved|switched|changed|new|no longer|any ?more|instead|left|"
                     r"quit|became|replaced|gave up|took up|started|since|finally)\b",
                     re.IGNORECASE)
# a change said in so many words: a present-tense question without time words puts the
# newer first only when the newer one says one of these. Measured 2026-11-27 (./dev bench
# retrieval --datasets locomo, ./dev bench currency): moving every chain for such questions
# cost LoCoMo hybrid R@5 0.615 -> 0.553 (a speaker's chat turns on one topic pair up as
# "changes"); moving only these, 0.613 (R@10 0.702; 0.707 before issue 32), with the
# generated present-tense questions' current first 0.71 (self) / 0.78 (people), against
# 0.85 / 0.81 moving every chain and 0.53 / 0.45 moving none
STRONG = re.compile(r"\b(moved|switched|changed|no longer|any ?more|instead|left|quit|"
                    r"replaced|gave up)\b", re.IGNORECASE)
# a speaker named at the start of a turn's text, after an optional [date]
SPEAKER = re.compile(r"^\s*(?:\[[^\]]{0,40}\]\s*)?([A-Z][\w'.-]{0,30}):\s")
LEADING = re.compile(r"^\W*(?:(?i:the|a|an|our|his|her|their|its)\s+)?([A-Z][\w'-]*)")
NOT_NAMES = frozenset({"The", "A", "An", "This", "That", "These", "Those", "It", "He", "She",
                       "They", "You", "Your", "There", "Here", "What", "When", "Where",
                       "Yes", "No", "Oh", "Ok", "Okay", "Thanks", "Thank", "Sure", "Well"})
FIRST_PERSON = re.compile(r"\b(i|i'm|i've|i'd|i'll|me|my|mine|myself|we|we're|our|us)\b",
                          re.IGNORECASE)
PRESENT = re.compile(r"^\W*(?:what|where|who|whom|whose|which|how|when|is|are|am|does|do|"
                     r"has|have)\b(?:(?!\b(?:did|was|were|had|used)\b).)*?"
                     r"\b(?:is|are|am|does|do|has|have|'s|'re)\b", re.IGNORECASE)
PAST = re.compile(r"\b(did|was|were|had|used to)\b", re.IGNORECASE)


# the words of a relative window of a day or a week (services/query/when.py: "yesterday",
# "last week", "three weeks ago", "the past few days"): read as the question's time, and not
# matched as words, since a passage that says "last week" or "a week" says it of its own time
# ("My sister visited me for a week in July" was the best keyword match of "What did I do
# last week?"). Longer windows keep their words: "four years ago" or "last year" said within
# months of the question means about the same time (dropping them too cost LoCoMo hybrid
# R@5 0.6159 -> 0.6101, its ten such questions all in years; 2026-12-01, ./dev bench
# retrieval --datasets locomo). Names of months and days and numbers stay words: a passage
# that names March may be about the March asked for
SHORT_WINDOW = 8 * 86400.0
RELATIVE = frozenset("""yesterday today tonight morning afternoon evening day days week weeks
weekend weekends month months year years ago back earlier last past previous this couple few
several one two three four five six seven eight nine ten eleven twelve""".split())  # noqa: SIM905
# a question whose other words are these asks what happened in its window ("What happened
# last week?"): see time_prior
HAPPENED = frozenset({"happen", "happened", "happening", "happens"})
# the share of such a question's score its window decides (the rest is relevance, so
# memories that fit the window alike keep relevance's order): close to 1, so that what
# happened in the window comes first ("What did I do last week?": the hike on Saturday, not
# "Today I'm just tired" on Thursday, issue 51)
ALONE_WEIGHT = 0.9


def time_terms(query: str, when: When) -> tuple[frozenset[str], bool]:
    """The question's words that are its relative window of a day or a week (to leave out
    of the keyword signal), and whether the question says nothing but its time: no word of it is
    matched except the words of its window and order ("What did I do last week?")."""
    if not when.words:
        return frozenset(), False
    said = set(terms(when.words))
    others = set(terms(query)) - said - HAPPENED
    short = when.lo is not None and when.hi is not None and when.hi - when.lo <= SHORT_WINDOW
    return frozenset(said & RELATIVE if short else ()), when.window and not others


def asked_order(when: When, query: str) -> str:
    """Which end of a changed fact the question wants: its words ("latest", "earliest"),
    else a present-tense question asks for the "present" (the latest, where the newer
    statement says that something changed: STRONG); a past-tense question for neither."""
    if when.order:
        return when.order
    if PRESENT.search(query) and not PAST.search(query):
        return "present"
    return ""


async def time_prior(graph: AsyncGraph, candidates: list[Candidate], when: When,
                     query: str = "") -> list[Candidate]:
    """The candidates re-scored by how well their event time fits the window (see the
    module's docstring), and (USER_WEIGHT > 0) by whether the user said them when the
    question is in the first person; best first. Unchanged when neither applies."""
    mine = USER_WEIGHT > 0 and bool(FIRST_PERSON.search(query))
    if not (when.window or mine) or not candidates:
        return candidates
    alone = time_terms(query, when)[1]
    best = max(max(c.score for c in candidates), 0.0)
    rows = await run_cells(graph, cypher_search.EVENT_TIMES,
                           {"ids": sorted({c.memory_id for c in candidates})})
    at = {row[0]: float(row[1]) for row in rows if row[1] is not None}
    users = {row[0] for row in rows if row[2] == "user"} if mine else set()
    window = [None if when.lo is None else iso(when.lo), None if when.hi is None
              else iso(when.hi)]
    fits = [closeness(at[c.memory_id], when) if c.memory_id in at else 0.0
            for c in candidates] if when.window else [0.0] * len(candidates)
    order = sorted(range(len(candidates)), key=lambda i: -fits[i])
    fit_rank = {i: rank for rank, i in enumerate(order, start=1)}
    out = []
    for i, (candidate, fit) in enumerate(zip(candidates, fits, strict=True)):
        why = dict(candidate.why)
        points = round(TIME_WEIGHT * fit * max(candidate.score, 0.0), 6) if not alone else \
            round(ALONE_WEIGHT * (fit * best - candidate.score), 6)
        if when.window:
            why["time"] = SignalMatch(rank=fit_rank[i], score=round(fit, 6),
                                      words=when.words, window=window, points=points)
        if candidate.memory_id in users:
            points += round(USER_WEIGHT * max(candidate.score, 0.0), 6)
        out.append(replace(candidate, score=round(candidate.score + points, 6), why=why))
    return sorted(out, key=lambda c: (-c.score, c.row[1]))


def subject_of(text: str, role: str | None) -> tuple[str, str, str]:
    """Who said a statement and whom it is about: its role, the speaker its text names
    ("[date] Caroline: ..."), and "self" when it speaks in the first person, else the name
    it starts with ("Mira has moved to Porto": Mira), else ''."""
    speaker = ""
    named = SPEAKER.match(text)
    if named:
        speaker, text = named[1], text[named.end():]
    if FIRST_PERSON.search(text):
        return role or "", speaker, "self"
    lead = next((w for w in LEADING.findall(text[:80]) if w not in NOT_NAMES), "")
    return role or "", speaker, lead


async def newer_first(graph: AsyncGraph, candidates: list[Candidate], order: str,
                      prop: str) -> list[Candidate]:
    """``candidates`` with the chains of changed statements among the best TOP memories
    ordered (``order``: "latest", "earliest" or "" to only mark them) and marked."""
    firsts: dict[str, int] = {}
    for i, candidate in enumerate(candidates):
        if candidate.memory_id not in firsts and len(firsts) < TOP:
            firsts[candidate.memory_id] = i
    if len(firsts) < 2:
        return candidates
    facts = await statement_facts(graph, [candidates[i] for i in firsts.values()])
    pairs = [(a, b) for n, a in enumerate(firsts) for b in list(firsts)[n + 1:]
             if a in facts and b in facts and facts[a][0] != facts[b][0]
             and facts[a][1] == facts[b][1]]
    if not pairs:
        return candidates
    texts = {m: candidates[i].row[2] for m, i in firsts.items()}
    chains = pair_statements(pairs, await similarities(graph, candidates, firsts, pairs, prop),
                             {m: facts[m][0] for m in firsts if m in facts},
                             {m for m, text in texts.items() if CHANGED.search(text)})
    if order == "present":  # no time words: only a change said in so many words moves
        strong = {c[-1] for c in chains if STRONG.search(texts[c[-1]])}
        return arrange(candidates, firsts, chains, "latest", strong)
    return arrange(candidates, firsts, chains, order)


async def statement_facts(graph: AsyncGraph, best: list[Candidate]
                          ) -> dict[str, tuple[tuple[float, float], tuple[str, str, str]]]:
    """Each statement's (event time, time added) and subject: the memories said by a role or
    in a thread (a conversation's turns); a document is no statement."""
    rows = await run_cells(graph, cypher_search.STATEMENT_FACTS,
                           {"ids": [c.memory_id for c in best]})
    text = {c.memory_id: c.row[2] for c in best}
    return {row[0]: ((float(row[1]), float(row[2])), subject_of(text[row[0]], row[3]))
            for row in rows if row[3] or row[4]}


async def similarities(graph: AsyncGraph, candidates: list[Candidate], firsts: dict[str, int],
                       pairs: list[tuple[str, str]], prop: str) -> dict[tuple[str, str], float]:
    chunk = {m: candidates[i].row[1] for m, i in firsts.items()}
    rows = await run_cells(graph, cypher_moves.CHUNK_SIMILARITY[prop],
                           {"pairs": [[chunk[a], chunk[b]] for a, b in pairs]})
    memory = {c: m for m, c in chunk.items()}
    return {(memory[row[0]], memory[row[1]]): 1.0 - float(row[2]) for row in rows}


def pair_statements(pairs: list[tuple[str, str]], sims: dict[tuple[str, str], float],
                    times: dict[str, tuple[float, float]], changes: set[str]
                    ) -> list[list[str]]:
    """Chains of statements, oldest first: each link an older and a newer statement that
    are each other's closest on their side of time (at least SIMILAR, or SIMILAR_CHANGED
    when the newer one is in ``changes``: it says something changed)."""
    newer: dict[str, tuple[float, str]] = {}
    older: dict[str, tuple[float, str]] = {}
    for (a, b), sim in sims.items():
        old, new = (a, b) if times[a] < times[b] else (b, a)
        if not (SIMILAR_CHANGED if new in changes else SIMILAR) <= sim < RESTATED:
            continue
        if sim > newer.get(old, (-1.0, ""))[0]:
            newer[old] = (sim, new)
        if sim > older.get(new, (-1.0, ""))[0]:
            older[new] = (sim, old)
    links = {old: new for old, (_, new) in newer.items() if older.get(new, (0, ""))[1] == old}
    starts = set(links) - set(links.values())
    chains = []
    for start in sorted(starts, key=lambda m: times[m]):
        chain = [start]
        while chain[-1] in links:
            chain.append(links[chain[-1]])
        chains.append(chain)
    return chains


def arrange(candidates: list[Candidate], firsts: dict[str, int], chains: list[list[str]],
            order: str, only: set[str] | None = None) -> list[Candidate]:
    """Each chain's members over the places it holds, newest (or oldest) first, marked. Only
    the statements that answer the question move (``answering``); with ``only``, just where
    the newest of those is in it (the rest are marked). A statement that moves takes the
    score of the place it takes, so the scores shown follow the order;
    ``why.currency.points`` is what that changed."""
    out = list(candidates)
    for chain in chains:
        newest = chain[-1]
        moving = answering(candidates, firsts, chain, order) if order else []
        if only is not None and moving and moving[-1] not in only:
            moving = []
        places = sorted(firsts[m] for m in moving)
        ranked = moving[::-1] if order != "earliest" else moving
        target = {m: places[i] for i, m in enumerate(ranked)}
        for memory in chain:
            source = candidates[firsts[memory]]
            at = target.get(memory, firsts[memory])
            score = candidates[at].score
            why = {**source.why, "currency": currency_why(chain, memory,
                                                          score - source.score)}
            out[at] = replace(source, score=score, why=why,
                              outdated_by="" if memory == newest else newest)
    return out


def answering(candidates: list[Candidate], firsts: dict[str, int], chain: list[str],
              order: str) -> list[str]:
    """The part of a chain that moves: while the statement it would put first (the newest;
    the oldest for "earliest") does not answer the question about as well as the chain's
    best placed one (its cosine to the question below ANSWERS of that one's, when the
    vector signal found both), it is left where it ranks. A statement that changed another
    fact the best one also states ("I'm a nurse and I live in Kraków" ... "I moved to
    Gdańsk") is not the answer to a question about the job, nor a third statement a chain
    gained by a looser likeness ("I play the guitar" ... "I play the cello now" ... "I
    drive a Tesla now") the answer to one about the instrument."""
    moving = list(chain)
    while len(moving) > 1:
        wanted = candidates[firsts[moving[0] if order == "earliest" else moving[-1]]]
        first = candidates[min(firsts[m] for m in moving)]
        mine, best = wanted.why.get("vector"), first.why.get("vector")
        if wanted is first or mine is None or best is None or best.score <= 0 \
                or mine.score >= ANSWERS * best.score:
            return moving
        moving = moving[1:] if order == "earliest" else moving[:-1]
    return []


def currency_why(chain: list[str], memory: str, points: float = 0.0) -> SignalMatch:
    """rank: the statement's place in its chain, newest first; score: how many statements
    the chain holds; points: what its move changed of its score (the place's score less
    its own), when it moved."""
    at = chain.index(memory)
    extra: dict[str, Any] = {}
    if at < len(chain) - 1:
        extra["newer"] = chain[-1]
    if at > 0:
        extra["older"] = chain[at - 1]
    if points:
        extra["points"] = round(points, 6)
    return SignalMatch(rank=len(chain) - at, score=float(len(chain)), **extra)
