"""build_context keeps what matters (issue 32): who said each line, and over a small budget
the turns it leaves out of the history compete with the memories, so the user's name told at
the start of a long chat is still in a context of 150 tokens. Through fastmcp's client, the
real query service, real workers and FalkorDB; tokens counted with the same tokenizer."""

from __future__ import annotations

import pytest

from tests.support.mcp import call
from tests.support.workers import run_workers
from zapomni.shared.embedding.embed_onnx import load_tokenizer

CHAT = [
    ("user", "Hi, I'm Zofia Wrona, nice to meet you."),
    ("assistant", "Hello Zofia! How can I help today?"),
    ("user", "I work as a veterinary surgeon at a clinic for horses."),
    ("assistant", "That sounds demanding and rewarding."),
    ("user", "I live in Toruń, by the Vistula."),
    ("assistant", "A lovely old town."),
    ("user", "Can you suggest a book for the weekend?"),
    ("assistant", "Try a collection of short stories; they suit a busy week."),
    ("user", "Any tips for a rainy Saturday?"),
    ("assistant", "A museum, a long lunch, or a film marathon at home."),
    ("user", "What about a quick dinner idea?"),
    ("assistant", "A vegetable stir fry takes fifteen minutes."),
    ("user", "And something to drink with it?"),
    ("assistant", "A cold jasmine tea goes well with it."),
]
_tokenizer = load_tokenizer()


def tokens(text: str) -> int:
    return len(_tokenizer.encode(text, add_special_tokens=False).ids)


@pytest.fixture
async def chat(client, settings) -> list[str]:
    ids = [(await call(client, "add_memory", text=text, namespace="vet",
                       metadata={"thread": "talk", "role": role}))["memory_id"]
           for role, text in CHAT]
    await run_workers(settings)
    return ids


async def test_the_prompt_says_who_said_each_line(client, chat):
    context = await call(client, "build_context", query="Which drink goes with dinner?",
                         thread="talk", namespace="vet", history_turns=4, memories=2)
    conversation = context["prompt"].split("\n\n")[-2].splitlines()
    assert conversation == ["## Recent conversation", *(
        f"{role.capitalize()}: {text}" for role, text in CHAT[-4:])]
    assert [t["role"] for t in context["history"]] == ["user", "assistant"] * 2
    memory = context["prompt"].split("\n\n")[0].splitlines()[1]
    assert memory.split("] ", 1)[1].startswith(("User: ", "Assistant: "))
    assert context["metadata"]["total_tokens"] == tokens(context["prompt"])


async def test_a_small_budget_keeps_the_facts_the_question_is_about(client, chat):
    """The name, job and city are in the five oldest turns; at 150 tokens the newest turns
    alone would fill the history and they would be lost."""
    context = await call(client, "build_context", query="What is my name?", thread="talk",
                         namespace="vet", token_budget=150)
    assert "Zofia" in context["prompt"]
    assert chat[0] in [m["memory_id"] for m in context["memories"]]
    assert chat[0] not in [t["memory_id"] for t in context["history"]]  # not twice
    info = context["metadata"]
    assert info["total_tokens"] == tokens(context["prompt"]) <= 150 and info["truncated"]
    job = await call(client, "build_context", query="Where do I work?", thread="talk",
                     namespace="vet", token_budget=150)
    assert "veterinary" in job["prompt"] and job["metadata"]["total_tokens"] <= 150


async def test_an_old_answer_is_not_pushed_out_by_recent_small_talk(client, settings):
    """Event time makes a turn said in March old in November: a context still ranks the
    name above last week's small talk (by relevance; putting the newer of two changed
    statements first is currency's work, not recency's)."""
    said = [("2026-03-01", "Hi, I'm Anna Nowak, a nurse."),
            ("2026-11-20", "I spent the past weekend at the beach in Sopot."),
            ("2026-11-21", "The weather was grey but the sea was calm."),
            ("2026-11-22", "We had grilled fish for dinner by the pier.")]
    for day, text in said:
        await call(client, "add_memory", text=text, namespace="anna",
                   metadata={"thread": "chat", "role": "user", "occurred_at": day})
    await run_workers(settings)
    context = await call(client, "build_context", query="What is my name?", namespace="anna",
                         token_budget=120, as_of="2026-11-27")
    assert "Anna Nowak" in context["memories"][0]["text"]
    assert context["metadata"]["total_tokens"] == tokens(context["prompt"]) <= 120
