"""Prompts a client can offer its user (MCP prompts/list): ready-made instructions that make
the model use the memory tools well. Each argument is checked as the tools check it; a bad
one is one line (a PromptError)."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from typing import Annotated

from fastmcp import FastMCP
from fastmcp.exceptions import PromptError
from pydantic import Field

from zapomni.shared.protocol.errors import InvalidInput
from zapomni.shared.protocol.validation import check_namespace
from zapomni.shared.text.conversation import check_thread

MAX_TOPIC_CHARS = 2000  # search_memory's query limit
SUMMARY_PAGES = 5  # list_memories pages summarise_namespace reads at most


@contextlib.contextmanager
def prompt_arguments() -> Iterator[None]:
    try:
        yield
    except InvalidInput as exc:
        raise PromptError(exc.message, log_level=logging.INFO) from None


def check_topic(topic: str) -> str:
    if not topic.strip():
        raise InvalidInput("topic: must not be empty; say what to recall")
    if len(topic) > MAX_TOPIC_CHARS:
        raise InvalidInput(f"topic: too long (at most {MAX_TOPIC_CHARS:,} characters); "
                           "shorten it to the question")
    return topic.strip()


def recall_text(topic: str, namespace: str) -> str:
    return (
        f"Recall what the long-term memory knows about this topic: {json.dumps(topic)}.\n"
        f"1. Call search_memory with query set to the topic and namespace "
        f"{json.dumps(namespace)} (limit 10). If we are in a conversation, call "
        "build_context with the topic as query instead: it adds the recent turns.\n"
        "2. If the results name people, places or organisations that matter, call "
        "get_entity for them to see what they are linked to.\n"
        "3. Answer from what was found only. Cite every fact with its memory_id in square "
        "brackets, e.g. [mem_...]. Say plainly what the memory does not contain; do not "
        "fill gaps from general knowledge without saying so.")


def save_text(namespace: str, thread: str | None) -> str:
    where = f"namespace {json.dumps(namespace)}"
    read = (f"First read the conversation with get_history(thread={json.dumps(thread)}, "
            f"{where}).\n" if thread else "")
    link = (f', "conversation": {json.dumps(thread)}' if thread else "")
    return (
        f"Save the key facts of this conversation to the long-term memory ({where}).\n"
        f"{read}"
        "Pick the facts worth remembering later: decisions, preferences, names, dates, "
        "numbers, commitments. Leave out greetings, guesses and small talk.\n"
        "Write each fact as one self-contained sentence (name who and what; no 'he' or "
        "'this').\nCall search_memory for each fact you suspect is stored already; skip "
        "those.\nSave the rest in one add_memories call, one item per fact, with metadata "
        '{"tags": [two to four short lowercase topic words], "source": "conversation"'
        f"{link}}}.\nThen tell the user how many facts were saved and list them.")


def summary_text(namespace: str) -> str:
    ns = json.dumps(namespace)
    return (
        f"Summarise what the long-term memory holds in namespace {ns}.\n"
        f"1. Call get_stats(namespace={ns}) for the counts.\n"
        f"2. Call list_memories(namespace={ns}, limit=200) and follow next_cursor for at "
        f"most {SUMMARY_PAGES} pages.\n"
        "3. Group the memories by topic (tags, source and first lines) and write a short "
        "overview: each topic with how many memories it has and a one-line gist, the "
        "newest and oldest dates, and what looks duplicated or out of date. Say if you "
        "read only part of the namespace.")


def add_prompts(mcp: FastMCP) -> None:
    @mcp.prompt
    def recall(topic: Annotated[str, Field(description="what to recall: a question, a "
                                                      "name or a subject")],
               namespace: str | None = None) -> str:
        """Recall what the memory knows about a topic, citing the memories it used."""
        with prompt_arguments():
            return recall_text(check_topic(topic), check_namespace(namespace))

    @mcp.prompt
    def save_conversation(namespace: str | None = None, thread: str | None = None) -> str:
        """Save the key facts of this conversation as separate, tagged memories."""
        with prompt_arguments():
            checked = check_thread(thread) if thread is not None else None
            return save_text(check_namespace(namespace), checked)

    @mcp.prompt
    def summarise_namespace(namespace: str | None = None) -> str:
        """An overview of what a namespace holds: topics, counts, dates."""
        with prompt_arguments():
            return summary_text(check_namespace(namespace))
