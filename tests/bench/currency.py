"""Facts that changed inside a conversation, without update_memory: does search put the
current statement first for "now" questions, and the first one for "initially" questions?

    ./dev bench currency [--users 20] [--people 40] [--seed 23] [--ranks relevance memory]
                         [--no-graph]

Generated at run time, deterministically (--seed). Two kinds of conversation, each a
thread of turns added in order through the front's code path, real in-process workers (with
entity extraction, as after any ingest) and the query service over HTTP:

  self    a user talks about themselves (namespace per user, role "user"; the assistant
          answers in between): "I live in Kraków." ... "I moved to Gdańsk." Asked "Where does
          the user live now?", "Where do I live?", "Where did the user live initially?",
          "Where did I use to live?".
  people  one namespace of 40 people, a thread per person, third person: "Mira lives in
          Lisbon." ... "Mira has moved to Porto." Asked the same four ways about Mira.

Each conversation states six facts in its first session, then changes four of them later:
in the same session minutes later, or in a session 3, 30 or 200 days on (event time is the
session's date, metadata occurred_at; the adds themselves are seconds apart). Every question
is asked as_of a day after the last session, with default search (hybrid, limit 10; --ranks
adds rank="memory").

Reported per question form: "current first" (the changed statement is the first result;
for now/present questions), "old first" (the first statement is; for initially / used to),
and "newer above older" / "older above newer" (the two statements' order, whatever is
above them), with a few misses. Targets (issue 32): current first >= 0.95 for "now"
questions, old first >= 0.90 for "initially / used to". Writes
tests/bench/results/currency.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from tests.bench.updates import CITIES, COMPANIES, PEOPLE, RESULTS
from tests.support.servers import ThreadedServer, falkordb_process
from tests.support.workers import run_workers, wait_tasks
from zapomni.services.mcp import front as ops
from zapomni.services.mcp.front import Front
from zapomni.services.query.app import build_app
from zapomni.services.stack.falkordb import free_port
from zapomni.shared.protocol.answers import SearchResponse
from zapomni.shared.protocol.api import SearchRequest
from zapomni.shared.protocol.validation import decode_add_memory
from zapomni.shared.settings import Settings
from zapomni.shared.tasks import tasks

START = datetime(2025, 1, 6, 9, 0, tzinfo=UTC).timestamp()
DAY = 86400.0
GAPS = (0.0, 3.0, 30.0, 200.0)  # days between a fact's first statement and its change

# attribute: values, then for "self" (first person) and "people" (third person, {s}): the
# first statement, the changed one, and the questions: now, present, initially, used to
ATTRIBUTES = {
    "city": (CITIES,
             ("I live in {v}.", "I moved to {v} last week, new flat and all.",
              "Where does the user live now?", "Where do I live?",
              "Where did the user live initially?", "Where did I use to live?"),
             ("{s} lives in {v}.", "{s} has moved to {v}.", "Where does {s} live now?",
              "Where does {s} live?", "Where did {s} live initially?",
              "Where did {s} use to live?")),
    "employer": (COMPANIES,
                 ("I work at {v}.", "I started a new job at {v}.",
                  "Where does the user work now?", "Where do I work?",
                  "Where did the user work initially?", "Where did I use to work?"),
                 ("{s} works at {v}.", "{s} left for a new job at {v}.",
                  "Where does {s} work now?", "Where does {s} work?",
                  "Where did {s} work initially?", "Where did {s} use to work?")),
    "car": (["red Volvo estate", "white Fiat Panda", "green Skoda Octavia", "blue Tesla",
             "grey Toyota Prius", "black Renault Clio", "silver Honda Jazz"],
            ("I drive a {v}.", "I sold my old car, I drive a {v} now.",
             "What car does the user drive now?", "What car do I drive?",
             "What car did the user drive initially?", "What car did I use to drive?"),
            ("{s} drives a {v}.", "{s} sold the old car and drives a {v} now.",
             "What car does {s} drive now?", "What car does {s} drive?",
             "What car did {s} drive initially?", "What car did {s} use to drive?")),
    "gym": (["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"],
            ("I go to the gym on {v}s.", "I switched my gym day to {v}.",
             "Which day does the user go to the gym now?", "Which day do I go to the gym?",
             "Which day did the user go to the gym initially?",
             "Which day did I use to go to the gym?"),
            ("{s} goes to the gym on {v}s.", "{s} switched gym day to {v}.",
             "Which day does {s} go to the gym now?", "Which day does {s} go to the gym?",
             "Which day did {s} go to the gym initially?",
             "Which day did {s} use to go to the gym?")),
    "editor": (["Vim", "Emacs", "VS Code", "Helix", "Sublime Text", "IntelliJ IDEA"],
               ("I write code in {v}.", "I switched editors, I use {v} now.",
                "Which code editor does the user use now?", "Which code editor do I use?",
                "Which code editor did the user use initially?",
                "Which code editor did I use to use?"),
               ("{s} writes code in {v}.", "{s} switched editors and uses {v} now.",
                "Which code editor does {s} use now?", "Which code editor does {s} use?",
                "Which code editor did {s} use initially?",
                "Which code editor did {s} use to use?")),
    "instrument": (["the guitar", "the piano", "the cello", "the drums", "the violin",
                    "the saxophone"],
                   ("I play {v} in a band.", "I gave up the old instrument, I play {v} now.",
                    "Which instrument does the user play now?", "Which instrument do I play?",
                    "Which instrument did the user play initially?",
                    "Which instrument did I use to play?"),
                   ("{s} plays {v} in a band.", "{s} took up {v} instead.",
                    "Which instrument does {s} play now?", "Which instrument does {s} play?",
                    "Which instrument did {s} play initially?",
                    "Which instrument did {s} use to play?")),
}
FORMS = ("now", "present", "initially", "used to")
FILLER = ["Thanks, that helps.", "Noted, I will keep that in mind.", "Sounds good!",
          "Got it.", "That makes sense.", "Good to know.", "Interesting, tell me more.",
          "I see."]
SMALL_TALK = ["The weather was lovely this weekend.", "I am reading a novel about sailors.",
              "My sister visited on Sunday.", "I watched a documentary about bees.",
              "Lunch today was a big salad.", "I need to call the plumber about the sink."]


@dataclass
class Fact:
    namespace: str
    attribute: str
    old: str
    new: str
    questions: dict[str, str]  # form -> question
    old_id: str = ""
    new_id: str = ""


@dataclass
class Conversation:
    namespace: str
    thread: str
    turns: list[tuple[str, dict]] = field(default_factory=list)  # (text, metadata) in order
    facts: list[Fact] = field(default_factory=list)


def converse(rng: random.Random, namespace: str, thread: str, person: int,
             subject: str | None) -> Conversation:
    """One conversation: six facts stated, then four of them changed later."""
    chat = Conversation(namespace, thread)
    chosen = rng.sample(sorted(ATTRIBUTES), 6)
    changed = set(rng.sample(chosen, 4))
    first_session: list[tuple[str, str]] = []
    later: dict[float, list[tuple[str, str]]] = {}
    for attribute in chosen:
        values, mine, theirs = ATTRIBUTES[attribute]
        old, new = rng.sample([v for v in values if v != subject], 2)
        forms = mine if subject is None else theirs
        fill = {"s": subject or ""}
        fact = Fact(namespace, attribute, forms[0].format(v=old, **fill),
                    forms[1].format(v=new, **fill),
                    dict(zip(FORMS, (q.format(**fill) for q in forms[2:]), strict=True)))
        first_session.append(("fact-old", fact.old))
        if attribute in changed:
            chat.facts.append(fact)
            later.setdefault(rng.choice(GAPS), []).append(("fact-new", fact.new))
    rng.shuffle(first_session)
    sessions = [(0.0, first_session + later.pop(0.0, []))]
    sessions += sorted(later.items())
    for gap, said in sessions:
        at = START + person * DAY + gap * DAY
        for i, (_, text) in enumerate(said):
            chat.turns.append((text, {"thread": thread, "role": "user",
                                      "occurred_at": at + 120 * i}))
            if subject is None:  # the assistant answers the user in between
                chat.turns.append((rng.choice(FILLER), {"thread": thread, "role": "assistant",
                                                        "occurred_at": at + 120 * i + 30}))
        chat.turns.append((rng.choice(SMALL_TALK), {"thread": thread, "role": "user",
                                                    "occurred_at": at + 120 * len(said)}))
    return chat


def conversations(users: int, people: int, seed: int) -> list[Conversation]:
    rng = random.Random(seed)
    out = [converse(rng, f"self-{i}", f"chat with user {i}", i, None) for i in range(users)]
    out += [converse(rng, "people", f"notes about {name}", i, name)
            for i, name in enumerate(PEOPLE[:people])]
    return out


async def store(front: Front, settings: Settings, chats: list[Conversation]) -> float:
    """Every turn through the front, then workers until all are searchable and read for
    entities; each fact learns its two memory ids."""
    started = time.perf_counter()
    ids: dict[tuple[str, str], str] = {}
    task_ids = []
    for chat in chats:
        for text, metadata in chat.turns:
            receipt = await ops.add_memory(front, decode_add_memory(text, metadata,
                                                                    chat.namespace))
            ids[(chat.namespace, text)] = receipt.memory_id
            task_ids.append(receipt.task_id)
    await run_workers(settings, timeout=7200)
    await wait_tasks(front.redis, task_ids, timeout=60)
    records = [await tasks.get_task(front.redis, i) for i in task_ids]
    await wait_tasks(front.redis, [r.graph_task_id for r in records if r.graph_task_id],
                     timeout=600)
    for chat in chats:
        for fact in chat.facts:
            fact.old_id, fact.new_id = ids[(chat.namespace, fact.old)], ids[
                (chat.namespace, fact.new)]
    return time.perf_counter() - started


async def ask(front: Front, fact: Fact, form: str, rank: str, as_of: float) -> list:
    request = SearchRequest(query=fact.questions[form], limit=10, namespace=fact.namespace,
                            rank=rank, as_of=as_of)
    return (await front.query.call("/v1/search", request, SearchResponse)).results


def place(ids: list[str], memory_id: str) -> int:
    return ids.index(memory_id) if memory_id in ids else len(ids) + 1


async def evaluate(front: Front, facts: list[Fact], kind: str, rank: str,
                   as_of: float) -> list[dict]:
    rows = []
    for form in FORMS:
        wanted_new = form in ("now", "present")
        first = ordered = marked = 0
        misses = []
        for fact in facts:
            hits = await ask(front, fact, form, rank, as_of)
            ids = list(dict.fromkeys(h.memory_id for h in hits))
            want, other = (fact.new_id, fact.old_id) if wanted_new else (fact.old_id,
                                                                          fact.new_id)
            first += ids[:1] == [want]
            ordered += place(ids, want) < place(ids, other)
            old_hit = next((h for h in hits if h.memory_id == fact.old_id), None)
            marked += bool(old_hit is not None and old_hit.outdated_by == fact.new_id)
            if ids[:1] != [want] and len(misses) < 4:
                misses.append({"question": fact.questions[form],
                               "wanted": fact.new if wanted_new else fact.old,
                               "first": hits[0].text if hits else None})
        n = len(facts)
        rows.append({"kind": kind, "form": form, "rank": rank, "facts": n,
                     "wanted first": round(first / n, 4),
                     "wanted above other": round(ordered / n, 4),
                     "old names new": round(marked / n, 4), "misses": misses})
    return rows


async def bench(url: str, args: argparse.Namespace) -> tuple[list[dict], float]:
    port = free_port()
    settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url,
                                 query_url=f"http://127.0.0.1:{port}",
                                 max_queue_depth=1_000_000, graph_auto=not args.no_graph)
    chats = conversations(args.users, args.people, args.seed)
    as_of = max(float(m["occurred_at"]) for c in chats for _, m in c.turns) + DAY
    rows = []
    with ThreadedServer(build_app(settings), port=port):
        front = Front(settings)
        try:
            seconds = await store(front, settings, chats)
            print(f"{sum(len(c.turns) for c in chats)} turns stored in {seconds:.0f} s",
                  flush=True)
            for kind in ("self", "people"):
                facts = [f for c in chats if c.namespace.startswith(kind[:4]) for f in c.facts]
                for rank in args.ranks:
                    rows += await evaluate(front, facts, kind, rank, as_of)
                    for row in rows[-len(FORMS):]:
                        print(json.dumps({k: v for k, v in row.items() if k != "misses"}),
                              flush=True)
        finally:
            await front.aclose()
    return rows, seconds


def table(rows: list[dict]) -> str:
    header = [h for h in rows[0] if h != "misses"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(r[h]) for h in header) + " |" for r in rows]
    for r in rows:
        for miss in r["misses"][:2]:
            lines.append(f"{r['kind']}/{r['form']}/{r['rank']} miss: {miss['question']!r} "
                         f"found {miss['first']!r} before {miss['wanted']!r}")
    return "\n".join(lines)


def verdict(rows: list[dict]) -> list[str]:
    out = []
    for rank in dict.fromkeys(r["rank"] for r in rows):
        now = [r for r in rows if r["rank"] == rank and r["form"] in ("now",)]
        early = [r for r in rows if r["rank"] == rank and r["form"] in ("initially",
                                                                        "used to")]
        n_now = sum(r["wanted first"] * r["facts"] for r in now) / sum(r["facts"] for r in now)
        n_early = sum(r["wanted first"] * r["facts"] for r in early) / sum(
            r["facts"] for r in early)
        out.append(f"rank {rank}: current first for now questions {n_now:.3f} (target >= 0.95:"
                   f" {'met' if n_now >= 0.95 else 'missed'}); old first for initially / used"
                   f" to {n_early:.3f} (target >= 0.90: "
                   f"{'met' if n_early >= 0.90 else 'missed'})")
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--people", type=int, default=40)
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--ranks", nargs="+", default=["relevance"],
                        choices=["relevance", "memory"])
    parser.add_argument("--no-graph", action="store_true",
                        help="no entity extraction after ingest")
    args = parser.parse_args()
    with falkordb_process() as url:
        rows, seconds = await bench(url, args)
    print()
    print(table(rows))
    for line in verdict(rows):
        print(line)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "currency.json").write_text(json.dumps(
        {"args": vars(args), "ingest_s": round(seconds, 1), "rows": rows}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
