"""One user's chat from March to November, as a new user met it (issue 51, item 6): a move
Kraków -> Gdańsk, a change of job nurse -> tester, a hike last week, a tired day, asked on 27
November 2026. Rebuilt from the issue's description: twelve turns of the user, each with the
day it was said. Through fastmcp's client, the real query service, real workers and
FalkorDB."""

from __future__ import annotations

import pytest

from tests.support.mcp import call
from tests.support.workers import run_workers
from zapomni.shared.embedding.embed_onnx import load_tokenizer

CHAT = [
    ("2026-03-02T09:00:00Z",
     "Hi! I'm Ola. My job: I'm a nurse at the city hospital, and I live in Kraków."),
    ("2026-03-20T19:00:00Z", "My favourite food is pierogi with mushrooms."),
    ("2026-04-11T10:00:00Z", "I adopted a cat called Mruczek."),
    ("2026-05-05T18:00:00Z", "I've been learning to play the guitar on Sundays."),
    ("2026-06-14T18:00:00Z",
     "Big news: I moved to Gdańsk last month, the new place is by the sea."),
    ("2026-07-19T12:00:00Z", "My sister visited me for a week in July."),
    ("2026-09-08T12:00:00Z", "I changed jobs: I'm a software tester now."),
    ("2026-10-03T20:00:00Z", "I've been reading a lot of crime novels lately."),
    ("2026-11-02T09:00:00Z", "I caught a cold and stayed home all weekend."),
    ("2026-11-21T17:00:00Z", "I went on a long hike in the Kashubian hills with two friends."),
    ("2026-11-24T19:00:00Z", "Mruczek knocked a plant off the windowsill again."),
    ("2026-11-26T20:00:00Z", "Today I'm just tired, nothing special happened."),
]
INTRO, FOOD, MOVE, TESTER, HIKE, TIRED = 0, 1, 4, 6, 9, 11
ASKED = "2026-11-27"
_tokenizer = load_tokenizer()


@pytest.fixture
async def chat(client, settings) -> list[str]:
    ids = [(await call(client, "add_memory", text=text, namespace="ola",
                       metadata={"thread": "chat", "role": "user", "occurred_at": at}))
           ["memory_id"] for at, text in CHAT]
    await run_workers(settings)
    return ids


async def ask(client, query: str) -> list[dict]:
    return (await call(client, "search_memory", query=query, namespace="ola",
                       as_of=ASKED))["results"]


def ranked_by_their_scores(hits: list[dict]) -> None:
    """The scores shown follow the order: a result is never above one with a higher score."""
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)


async def test_the_job_now_is_the_tester_turn_and_the_move_stays_where_it_ranks(client, chat):
    """The move to Gdańsk and the intro ("a nurse ... in Kraków") are a chain (the city
    changed); asked about the job, the move was put at the intro's place, above turns it
    scored below. It answers the question far less than the intro (cosine 0.14 against
    0.40), so the chain is marked and not moved."""
    hits = await ask(client, "What is my job now?")
    order = [h["memory_id"] for h in hits]
    assert order[0] == chat[TESTER]
    assert order.index(chat[INTRO]) < order.index(chat[MOVE])
    move = hits[order.index(chat[MOVE])]
    assert "points" not in move["why"]["currency"]  # marked, not moved
    ranked_by_their_scores(hits)


async def test_last_week_is_the_hike(client, chat):
    """"What did I do last week?" names nothing but a time: the window (16-22 November)
    decides, so the hike on the 21st comes before "Today I'm just tired" of the 26th, which
    matched the words better. "week" no longer matches "for a week in July"."""
    hits = await ask(client, "What did I do last week?")
    assert hits[0]["memory_id"] == chat[HIKE]
    assert hits[0]["why"]["time"]["score"] == 1.0
    assert hits[0]["why"]["time"]["window"] == ["2026-11-16T00:00:00Z", "2026-11-23T00:00:00Z"]
    order = [h["memory_id"] for h in hits]
    assert order.index(chat[HIKE]) < order.index(chat[TIRED])
    assert all("keyword" not in h["why"] for h in hits)  # "last", "week": the time, not words
    ranked_by_their_scores(hits)


async def test_where_i_lived_first_and_now_show_the_scores_they_were_ranked_by(client, chat):
    """Kraków (the intro) first for "initially", Gdańsk first for "now"; a statement the
    chain moved shows the score of the place it took, and why.currency.points the change
    (it showed Kraków first with 0.755 and Gdańsk third with 0.931)."""
    first = await ask(client, "Where did I live initially?")
    assert first[0]["memory_id"] == chat[INTRO]
    assert first[0]["outdated_by"] == chat[MOVE]
    ranked_by_their_scores(first)
    now = await ask(client, "Where do I live now?")
    order = [h["memory_id"] for h in now]
    assert order[0] == chat[MOVE] and order.index(chat[INTRO]) > 0
    assert now[0]["why"]["currency"]["points"] > 0
    assert now[order.index(chat[INTRO])]["why"]["currency"]["points"] < 0
    ranked_by_their_scores(now)


async def test_a_small_context_holds_the_facts_not_labels(client, chat):
    """At 150 tokens a context held one line (74 tokens used) and lost the job: labels with
    ids took ~40 tokens a memory. Now the day and "outdated" label it; the ids only on
    request."""
    context = await call(client, "build_context", query="What is my job now?", namespace="ola",
                         thread="chat", token_budget=150, as_of=ASKED)
    prompt, info = context["prompt"], context["metadata"]
    assert "- [8 Sep 2026] User: I changed jobs: I'm a software tester now." in prompt
    assert "mem_" not in prompt
    assert info["memory_count"] + info["history_count"] >= 4
    assert info["total_tokens"] == len(_tokenizer.encode(prompt, add_special_tokens=False).ids)
    assert 150 - 20 < info["total_tokens"] <= 150  # what fits is used
    named = await call(client, "build_context", query="What is my job now?", namespace="ola",
                       thread="chat", token_budget=150, as_of=ASKED, show_ids=True)
    assert f"[{chat[TESTER]} | 8 Sep 2026]" in named["prompt"]


async def test_a_corrected_turn_keeps_the_day_it_was_said(client, settings, chat):
    """update_memory with a new text took the update's time as its event time, so an old
    fact corrected today became the thread's newest turn. The new version keeps the old
    one's event time, unless the update gives one."""
    fixed = (await call(client, "update_memory", memory_id=chat[FOOD], namespace="ola",
                        text="My favourite food is pierogi with cabbage."))["memory_id"]
    later = (await call(client, "update_memory", memory_id=chat[HIKE], namespace="ola",
                        text="I went on a long hike in the Kashubian hills with three friends.",
                        metadata={"occurred_at": "2026-11-22T10:00:00Z"}))["memory_id"]
    await run_workers(settings)
    memory = await call(client, "get_memory", memory_id=fixed, namespace="ola")
    assert memory["occurred_at"] == "2026-03-20T19:00:00+00:00"
    turns = (await call(client, "get_history", thread="chat", namespace="ola",
                        limit=20))["turns"]
    ids = [t["memory_id"] for t in turns]
    assert ids[1] == fixed and chat[FOOD] not in ids  # where the old one was, not last
    assert ids[-1] == chat[TIRED]
    moved = await call(client, "get_memory", memory_id=later, namespace="ola")
    assert moved["occurred_at"] == "2026-11-22T10:00:00+00:00"
