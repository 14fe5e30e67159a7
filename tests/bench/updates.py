"""Knowledge updates: facts that changed, and whether search answers with the current one.

    ./dev bench updates [--facts 240] [--old-age-days 30] [--ranks relevance memory]
                        [--no-graph] [--seed 17]

The facts are generated at run time, deterministically (--seed): templated statements about
invented people and projects (a favourite tea, a city, an employer, a manager, a deadline, a
budget...), each with a first value, a changed value worded differently ("Mira lives in
Lisbon." then "Mira has moved to Porto."), and two questions: a direct one in the
attribute's own words ("Where does Mira live?"), as an agent asks its memory, and a
paraphrase that shares no word with the statements but the name ("Which town is Mira's
home?"). Every subject has several facts, so the other facts about the same subject are
the distractors.

Three namespaces, through the front's code path (validation, task records, the queue), real
in-process workers with the in-process model, and the query service over HTTP:

  current only    the control: only the changed statements. What search can do for these
                  questions at all, with nothing old in the way.
  update_memory   the first statements, then each replaced with update_memory (a new text);
                  the current statement should come first, the old one never.
  thread          one thread per subject: the first statements as turns, then the changed
                  ones as later turns of the same thread, both kept; how often the current
                  statement ranks above the old one, with each --ranks value that
                  SearchRequest accepts ("memory" blends relevance with recency, frequency
                  and importance; "not available" when search has no rank option).

--old-age-days backdates the first statements (their created_at and event time, set straight
in FalkorDB after ingest), as if the changes came that many days later: recency ranking has
something to see. Prints a table and a few misses; writes
tests/bench/results/updates.json. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.servers import ThreadedServer, falkordb_process
from tests.support.workers import run_workers, wait_tasks
from zapomni.services.mcp import front as ops
from zapomni.services.mcp import update
from zapomni.services.mcp.front import Front
from zapomni.services.query.app import build_app
from zapomni.services.stack.falkordb import free_port
from zapomni.shared.protocol.answers import SearchResponse
from zapomni.shared.protocol.api import SearchRequest
from zapomni.shared.protocol.validation import decode_add_memory, decode_update
from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import GraphStore, run

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"

PEOPLE = ["Mira", "Tobias", "Anouk", "Keiran", "Liesl", "Osric", "Priya", "Joaquin",
          "Saoirse", "Emeka", "Yuki", "Ingrid", "Rafferty", "Zanele", "Matteo", "Freya",
          "Dagny", "Ilyas", "Noor", "Casimir", "Elodie", "Bram", "Tamsin", "Kofi", "Astrid",
          "Lorcan", "Mireille", "Tariq", "Wren", "Sunniva", "Caspian", "Ottilie", "Hamid",
          "Linnea", "Ezio", "Brigid", "Soren", "Amara", "Florian", "Yasmin"]
PROJECTS = ["Halcyon", "Bluefin", "Kestrel", "Juniper", "Marigold", "Obsidian", "Tundra",
            "Quasar", "Lantern", "Sparrow", "Foxglove", "Meridian"]
COMPANIES = ["Orbitech", "Fennel Labs", "Northwind Analytics", "Bramble & Co", "Glasswing",
             "Tidewater Systems", "Copperleaf", "Vantablue", "Hollowpine Games", "Quillmark"]
CITIES = ["Lisbon", "Porto", "Tallinn", "Ghent", "Valencia", "Bergen", "Kraków", "Turin",
          "Graz", "Aarhus", "Ljubljana", "Bilbao"]

# attribute: (values, first statement, changed statement, question, paraphrased question);
# {s} the subject, {v} a value
PERSON = {
    "tea": (["jasmine", "rooibos", "sencha", "Earl Grey", "chamomile", "oolong", "darjeeling",
             "peppermint", "matcha"],
            "{s}'s favourite tea is {v}.", "{s}'s favourite tea is now {v}.",
            "What is {s}'s favourite tea?", "What kind of tea does {s} like best?"),
    "city": (CITIES, "{s} lives in {v}.", "{s} has moved to {v}.", "Where does {s} live?",
             "Which town is {s}'s home?"),
    "employer": (COMPANIES, "{s} works at {v}.", "{s} left for a new job at {v}.",
                 "Where does {s} work?", "Which company employs {s}?"),
    "manager": (PEOPLE, "{s} reports to {v}.", "{s}'s manager is now {v}.",
                "Who is {s}'s manager?", "Who is {s}'s boss?"),
    "car": (["red Volvo estate", "white Fiat Panda", "green Skoda Octavia", "blue Tesla",
             "grey Toyota Prius", "black Renault Clio", "silver Honda Jazz"],
            "{s} drives a {v}.", "{s} sold the old car and drives a {v} now.",
            "What car does {s} drive?", "What vehicle does {s} have?"),
    "gym": (["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"],
            "{s} goes to the gym on {v}s.", "{s} switched gym day to {v}.",
            "Which day does {s} go to the gym?", "On which day of the week does {s} work out?"),
    "floor": (["second", "third", "fourth", "fifth", "sixth", "seventh"],
              "{s}'s desk is on the {v} floor.", "{s}'s desk was moved to the {v} floor.",
              "Which floor is {s}'s desk on?", "Where in the office does {s} sit?"),
    "editor": (["Vim", "Emacs", "VS Code", "Helix", "Sublime Text", "IntelliJ IDEA"],
               "{s} writes code in {v}.", "{s} switched editors and uses {v} now.",
               "Which code editor does {s} use?", "What does {s} program in, tool-wise?"),
    "phone": ([f"+44 7700 900{i:03d}" for i in range(0, 999, 37)],
              "{s}'s phone number is {v}.", "{s} has a new phone number: {v}.",
              "What is {s}'s phone number?", "How can I call {s}?"),
}
PROJECT = {
    "deadline": ([f"{d} {m}" for m in ("March", "May", "July", "October") for d in (3, 14, 28)],
                 "The {s} project is due on {v}.", "The {s} deadline was pushed to {v}.",
                 "When is the {s} deadline?", "When does {s} have to ship?"),
    "lead": (PEOPLE, "{v} leads the {s} project.", "{s} is now led by {v}.",
             "Who leads the {s} project?", "Who is in charge of {s}?"),
    "budget": ([f"{n:,} euros" for n in range(40_000, 400_000, 15_000)],
               "The {s} budget is {v}.", "The {s} budget was changed to {v}.",
               "What is the {s} budget?", "How much money does {s} have?"),
    "standup": (["9:00", "9:30", "10:00", "10:15", "11:00", "14:00"],
                "The {s} team meets for standup at {v}.", "The {s} standup moved to {v}.",
                "When is the {s} standup?", "What time is the {s} daily meeting?"),
    "database": (["PostgreSQL", "MySQL", "SQLite", "MongoDB", "ClickHouse", "DuckDB"],
                 "{s} keeps its data in {v}.", "{s} has migrated its data to {v}.",
                 "Which database does {s} use?", "Where are the {s} records kept?"),
    "channel": (["#general", "#eng-core", "#launch-room", "#platform", "#skunkworks"],
                "Discussion about {s} happens in {v}.", "{s} discussion moved to {v}.",
                "Which channel is {s} discussed in?", "Where do people talk about {s}?"),
}


@dataclass(frozen=True)
class Fact:
    subject: str
    attribute: str
    old: str
    new: str
    question: str  # direct: the attribute's own words ("Where does Mira live?")
    paraphrase: str  # worded unlike either statement ("Which town is Mira's home?")


def facts(count: int, seed: int) -> list[Fact]:
    """``count`` facts about invented people and projects, each with two different values."""
    rng = random.Random(seed)
    pool = [(s, a, spec) for s in PEOPLE for a, spec in PERSON.items()] + \
        [(s, a, spec) for s in PROJECTS for a, spec in PROJECT.items()]
    chosen = rng.sample(pool, min(count, len(pool)))
    out = []
    for subject, attribute, (values, first, changed, question, paraphrase) in chosen:
        old, new = rng.sample([v for v in values if v != subject], 2)
        out.append(Fact(subject, attribute, first.format(s=subject, v=old),
                        changed.format(s=subject, v=new), question.format(s=subject),
                        paraphrase.format(s=subject)))
    return out


async def add_all(front: Front, texts: list[tuple[str, dict]], namespace: str) -> list:
    receipts = []
    for text, metadata in texts:
        receipts.append(await ops.add_memory(front, decode_add_memory(text, metadata,
                                                                      namespace)))
    return receipts


async def settle(front: Front, settings: Settings, task_ids: list[str]) -> float:
    started = time.perf_counter()
    await run_workers(settings, timeout=7200)
    await wait_tasks(front.redis, task_ids, timeout=60)
    return time.perf_counter() - started


async def backdate(settings: Settings, namespace: str, ids: list[str], days: float) -> None:
    """The first statements, as if made ``days`` before the changes."""
    store = GraphStore(settings)
    try:
        await run(store.graph(namespace), "UNWIND $ids AS id MATCH (m:Memory {id: id}) "
                  "SET m.created_at = m.created_at - $age, "
                  "m.occurred_at = m.occurred_at - $age", {"ids": ids, "age": days * 86400})
    finally:
        await store.aclose()


async def ranked(front: Front, question: str, namespace: str,
                 rank: str | None) -> list[tuple[str, str]]:
    """(memory id, text) of the best 10 memories for the question, best first."""
    fields = {"rank": rank} if rank else {}
    request = SearchRequest(query=question, limit=10, namespace=namespace, **fields)
    best: dict[str, str] = {}
    for hit in (await front.query.call("/v1/search", request, SearchResponse)).results:
        best.setdefault(hit.memory_id, hit.text)
    return list(best.items())


def place(ids: list[str], memory_id: str) -> int:
    return ids.index(memory_id) if memory_id in ids else len(ids) + 1


def row(variant: str, rank: str, pairs: list[tuple[str, str]], chosen: list[Fact],
        asked: list[str], results: list[list[tuple[str, str]]], seconds: float) -> dict:
    """The shares over all facts, and a few questions whose first answer was not the current
    statement (what came first instead)."""
    n, first, above, old_seen, misses = len(pairs), 0, 0, 0, []
    for (old, new), fact, question, hits in zip(pairs, chosen, asked, results, strict=True):
        ids = [memory for memory, _ in hits]
        first += ids[:1] == [new]
        above += place(ids, new) < place(ids, old)
        old_seen += old in ids
        if ids[:1] != [new] and len(misses) < 5:
            misses.append({"question": question, "current": fact.new,
                           "first": hits[0][1] if hits else None})
    control = not pairs[0][0]  # nothing old stored
    return {"variant": variant, "rank": rank, "facts": n, "current_first": round(first / n, 4),
            "current_above_old": "-" if control else round(above / n, 4),
            "old_in_top10": "-" if control else round(old_seen / n, 4),
            "ingest_s": round(seconds, 1), "misses": misses}


@dataclass
class Stored:
    """One namespace of the benchmark: the (old, current) memory ids of each fact, and the
    seconds its ingest took."""

    variant: str
    namespace: str
    pairs: list[tuple[str, str]]
    seconds: float


async def store_current_only(front: Front, settings: Settings, chosen: list[Fact]) -> Stored:
    """The control: only the changed statements. What search can do for these questions
    at all, with nothing old in the way."""
    added = await add_all(front, [(f.new, {}) for f in chosen], "control")
    seconds = await settle(front, settings, [r.task_id for r in added])
    return Stored("current only", "control", [("", r.memory_id) for r in added], seconds)


async def store_updated(front: Front, settings: Settings, chosen: list[Fact],
                        age: float) -> Stored:
    """The first statements, then each replaced through update_memory with the changed one."""
    namespace = "updates"
    first = await add_all(front, [(f.old, {}) for f in chosen], namespace)
    seconds = await settle(front, settings, [r.task_id for r in first])
    await backdate(settings, namespace, [r.memory_id for r in first], age)
    receipts = [await update.update_memory(front, decode_update(r.memory_id, f.new, None,
                                                                namespace))
                for r, f in zip(first, chosen, strict=True)]
    assert all(r.supersedes == o.memory_id for r, o in zip(receipts, first, strict=True))
    seconds += await settle(front, settings, [r.task_id for r in receipts])
    return Stored("update_memory", namespace, [(o.memory_id, r.memory_id) for o, r in
                                               zip(first, receipts, strict=True)], seconds)


async def store_in_threads(front: Front, settings: Settings, chosen: list[Fact],
                           age: float) -> Stored:
    """One thread per subject: the first statements as turns, the changed ones as later
    turns of the same thread; both kept."""
    namespace = "threads"
    first = await add_all(front, [(f.old, {"thread": f"chat about {f.subject}"})
                                  for f in chosen], namespace)
    seconds = await settle(front, settings, [r.task_id for r in first])
    await backdate(settings, namespace, [r.memory_id for r in first], age)
    second = await add_all(front, [(f.new, {"thread": f"chat about {f.subject}"})
                                   for f in chosen], namespace)
    seconds += await settle(front, settings, [r.task_id for r in second])
    return Stored("thread", namespace, [(o.memory_id, n.memory_id) for o, n in
                                        zip(first, second, strict=True)], seconds)


RANKED = "rank" in SearchRequest.__struct_fields__  # search_memory has rank=...


async def evaluate(front: Front, stored: Stored, chosen: list[Fact], style: str,
                   rank: str) -> dict:
    if rank != "relevance" and not RANKED:
        return {"questions": style, "variant": stored.variant, "rank": rank,
                "facts": len(chosen), "current_first": "not available",
                "current_above_old": "not available", "old_in_top10": "not available",
                "ingest_s": round(stored.seconds, 1)}
    asked = [f.question if style == "direct" else f.paraphrase for f in chosen]
    results = [await ranked(front, q, stored.namespace, rank if RANKED else None)
               for q in asked]
    return {"questions": style} | row(stored.variant, rank, stored.pairs, chosen, asked,
                                      results, stored.seconds)


async def bench(url: str, args: argparse.Namespace) -> list[dict]:
    port = free_port()
    settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url,
                                 query_url=f"http://127.0.0.1:{port}",
                                 max_queue_depth=1_000_000, graph_auto=not args.no_graph)
    chosen = facts(args.facts, args.seed)
    print(f"{len(chosen)} facts about {len({f.subject for f in chosen})} subjects; e.g. "
          f"{chosen[0].old!r} -> {chosen[0].new!r}, asked {chosen[0].question!r} or "
          f"{chosen[0].paraphrase!r}", flush=True)
    rows = []
    with ThreadedServer(build_app(settings), port=port):
        front = Front(settings)
        try:
            stores = [await store_current_only(front, settings, chosen),
                      await store_updated(front, settings, chosen, args.old_age_days),
                      await store_in_threads(front, settings, chosen, args.old_age_days)]
            for style in ("direct", "paraphrased"):
                for stored in stores:
                    for rank in (args.ranks if stored.variant == "thread" else ["relevance"]):
                        rows.append(await evaluate(front, stored, chosen, style, rank))
                        print(json.dumps(rows[-1])[:200], flush=True)
        finally:
            await front.aclose()
    return rows


def table(rows: list[dict]) -> str:
    header = [h for h in rows[0] if h != "misses"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(r[h]) for h in header) + " |" for r in rows]
    for r in rows:
        for miss in r.get("misses", [])[:3]:
            lines.append(f"{r['questions']} {r['variant']}/{r['rank']} miss: "
                         f"{miss['question']!r} found {miss['first']!r} before "
                         f"{miss['current']!r}")
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--facts", type=int, default=240)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--old-age-days", type=float, default=30.0)
    parser.add_argument("--ranks", nargs="+", default=["relevance", "memory"])
    parser.add_argument("--no-graph", action="store_true",
                        help="no entity extraction after ingest (faster; hybrid without it)")
    args = parser.parse_args()
    with falkordb_process() as url:
        rows = await bench(url, args)
    print()
    print(table(rows))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "updates.json").write_text(json.dumps(
        {"args": vars(args), "rows": rows}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())

