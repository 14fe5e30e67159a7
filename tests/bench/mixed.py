"""Mixed-size benchmark: labelled questions among big memories, with the per-memory cap on and off.

    ./dev bench mixed [--caps 0 3 5] [--changelog-mb 2] [--modes hybrid vector keyword graph]
                      [--sample N] [--variants labelled separate joined] [--dump FOLDER]

Three namespaces, each through the front and real worker processes (tests/bench/retrieval.py's
ingest, with its embedding cache), each asked HotpotQA's 100 questions (nDCG@10, R@10) and
LoCoMo conversation conv-30's questions (R@10, categories 1-4) in every mode:

- ``labelled``: HotpotQA's 994 paragraphs and conv-30's turns (threads per session), as today;
- ``separate``: the same, with large unrelated documents beside them: Debian changelog and
  NEWS files under /usr/share/doc, whole, in path order, until ``--changelog-mb`` of text,
  none over 250k characters (smaller than the joined memory); ``--changelog-mb 25`` takes
  all of them here (994 files, 23.5 MB, ~106k chunks a namespace: with 2 workers on 2
  cores, searchable in 54 minutes and entities read in 103, 2026-11-26);
- ``joined``: as ``separate``, but half of the HotpotQA paragraphs (a seeded choice) joined
  into one big memory on the questions' own topics. A hit in it counts as the paragraphs
  at least half inside its span (else the one it overlaps most): what the agent reads.

Each namespace is asked through one query service per cap (MAX_PER_MEMORY). Besides
quality, each row says how many of the top 10 results the namespace's biggest memory, and the
joined memory, hold on average. Prints a table and writes tests/bench/results/mixed.json;
``--dump`` also writes each question's top 10 (documents, scores, signals, the passage's
start) per variant, cap and mode, for studying what the large documents displace.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import gzip
import json
import random
from dataclasses import replace
from pathlib import Path

import httpx2
import msgspec
import redis.asyncio

from tests.bench.retrieval import (
    RESULTS,
    Doc,
    Query,
    cached_store,
    ingest,
    load_beir,
    load_locomo,
    mean,
    ndcg,
    recall,
    reset,
)
from tests.support.servers import ThreadedServer
from zapomni.services.query import hits
from zapomni.services.query.app import build_app
from zapomni.services.stack.falkordb import free_port
from zapomni.shared.protocol.answers import SearchHit, SearchResponse
from zapomni.shared.protocol.api import SEARCH_MODES, SearchRequest
from zapomni.shared.settings import Settings

DOCS = Path("/usr/share/doc")
CONVERSATION = "conv-30"
JOINED = "joined-paragraphs"
VARIANTS = ("labelled", "separate", "joined")
SEED = 21
LIMIT = 20  # results asked for; the metrics read the first 10 (documents, deduplicated)


def changelogs(budget: int, largest: int = 250_000) -> list[Doc]:
    """Whole changelog and NEWS files in path order (one copy of each text, none over
    ``largest`` characters) until ``budget`` characters."""
    found = sorted(p for p in DOCS.rglob("*") if p.is_file() and p.name.lower().startswith(
        ("changelog", "news")))
    docs: list[Doc] = []
    seen: set[str] = set()
    total = 0
    for path in found:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        text = raw.decode("utf-8", errors="replace").replace("\x00", "").strip()
        if not text or text in seen or len(text) > largest:
            continue
        seen.add(text)
        docs.append(Doc(str(path.relative_to(DOCS)), text, ""))
        total += len(text)
        if total >= budget:
            break
    return docs


def labelled(sample: int = 0) -> tuple[list[Doc], dict[str, list[Query]]]:
    """HotpotQA and conv-30 of LoCoMo; ``sample``: only the first ``sample`` HotpotQA
    questions, their paragraphs and as large a share of the others, and no LoCoMo (a
    smoke run)."""
    hotpot_docs, hotpot = load_beir("hotpotqa", "hotpotqa_train100", "dev.tsv")
    if sample:
        hotpot = hotpot[:sample]
        gold = set().union(*(q.relevant for q in hotpot))
        share = max(1, 100 // sample)
        hotpot_docs = [d for i, d in enumerate(hotpot_docs) if d.id in gold or not i % share]
        return hotpot_docs, {"hotpotqa": hotpot}
    turns, asked = load_locomo()
    turns = [d for d in turns if d.namespace == f"locomo-{CONVERSATION}"]
    locomo = [q for q in asked if q.namespace == f"locomo-{CONVERSATION}"
              and q.category in (1, 2, 3, 4)]
    return hotpot_docs + turns, {"hotpotqa": hotpot, "locomo": locomo}


def join_half(docs: list[Doc]) -> tuple[list[Doc], Doc, list[tuple[int, int, str]]]:
    """Half the HotpotQA paragraphs as one memory: the other docs, the joined one, and each
    paragraph's span in it (start, end, doc id)."""
    paragraphs = [d for d in docs if d.namespace == "hotpotqa"]
    chosen = {d.id for d in random.Random(SEED).sample(paragraphs, len(paragraphs) // 2)}
    spans, parts, at = [], [], 0
    for doc in paragraphs:
        if doc.id in chosen:
            spans.append((at, at + len(doc.text), doc.id))
            parts.append(doc.text)
            at += len(doc.text) + 2
    rest = [d for d in docs if d.id not in chosen]
    return rest, Doc(JOINED, "\n\n".join(parts), ""), spans


def namespaces(base: list[Doc], logs: list[Doc], variants: tuple[str, ...] = VARIANTS
               ) -> tuple[list[Doc], list[tuple[int, int, str]]]:
    """Every document of the namespaces asked for, and the joined memory's spans."""
    rest, joined, spans = join_half(base)
    groups = {"labelled": base, "separate": base + logs, "joined": rest + logs + [joined]}
    docs = [replace(d, namespace=f"mixed-{variant}") for variant in variants
            for d in groups[variant]]
    return docs, spans


def docs_at(spans: list[tuple[int, int, str]], start: int, end: int) -> list[str]:
    """The paragraphs of the joined memory that a hit shows: those at least half inside its
    span, in order, or else the one it overlaps most (before paragraphs first, a chunk of
    ~250 tokens held two or three HotpotQA paragraphs, and the agent reads them all)."""
    i = max(0, bisect.bisect_right(spans, (start, float("inf"), "")) - 1)
    near = [(min(end, s[1]) - max(start, s[0]), s) for s in spans[max(0, i - 1): i + 8]]
    inside = [s[2] for overlap, s in near if overlap * 2 >= s[1] - s[0]]
    return inside or [max(near)[1][2]]


def hit_docs(hits: list[SearchHit], owners: dict, namespace: str,
             spans: list[tuple[int, int, str]], joined_id: str | None) -> list[str]:
    docs: dict[str, None] = {}
    for hit in hits:
        if hit.memory_id == joined_id:
            for doc in docs_at(spans, hit.char_start, hit.char_end):
                docs.setdefault(doc)
        else:
            for doc in owners[(namespace, hit.memory_id)]:
                docs.setdefault(doc)
    return list(docs)


def hit_row(hit: SearchHit, context: dict, namespace: str) -> dict:
    return {"docs": context["owners"][(namespace, hit.memory_id)][:3], "score": hit.score,
            "start": hit.char_start, "text": hit.text[:300],
            "why": {k: [v.rank, round(v.score, 4)] for k, v in hit.why.items()}}


def biggest(docs: list[Doc], owners: dict, namespace: str) -> str:
    """The memory id of the namespace's longest text."""
    longest = max((d for d in docs if d.namespace == namespace), key=lambda d: len(d.text))
    return next(m for (ns, m), ids in owners.items() if ns == namespace and longest.id in ids)


async def ask(http: httpx2.AsyncClient, query: Query, namespace: str, mode: str
              ) -> list[SearchHit]:
    body = msgspec.json.encode(SearchRequest(query=query.text[:2000], limit=LIMIT,
                                             namespace=namespace, mode=mode))
    response = await http.post("/v1/search", content=body,
                               headers={"content-type": "application/json"})
    response.raise_for_status()
    return msgspec.json.decode(response.content, type=SearchResponse).results


async def measure(http: httpx2.AsyncClient, asked: dict[str, list[Query]], variant: str,
                  mode: str, context: dict, dumped: list[dict] | None = None) -> dict:
    namespace = f"mixed-{variant}"
    big = biggest(context["docs"], context["owners"], namespace)
    joined_id = context["joined"] if variant == "joined" else None
    row: dict = {}
    held: list[float] = []
    held_joined: list[float] = []
    for name, queries in asked.items():
        ranked = []
        for query in queries:
            hits = await ask(http, query, namespace, mode)
            held.append(sum(h.memory_id == big for h in hits[:10]))
            held_joined.append(sum(h.memory_id == joined_id for h in hits[:10]))
            ranked.append(hit_docs(hits, context["owners"], namespace, context["spans"],
                                   joined_id))
            if dumped is not None:
                dumped.append({"set": name, "id": query.id, "question": query.text,
                               "relevant": sorted(query.relevant), "ranked": ranked[-1][:10],
                               "hits": [hit_row(h, context, namespace) for h in hits[:10]]})
        pairs = list(zip(queries, ranked, strict=True))
        if name == "hotpotqa":
            row["hotpotqa nDCG@10"] = mean([ndcg(r, q.relevant) for q, r in pairs])
            row["hotpotqa R@10"] = mean([recall(r, q.relevant, 10) for q, r in pairs])
        else:
            row["locomo R@10"] = mean([recall(r, q.relevant, 10) for q, r in pairs])
    row["biggest in top 10"] = mean(held)
    row["joined in top 10"] = mean(held_joined) if joined_id else "-"
    return row


async def run(args: argparse.Namespace, url: str) -> list[dict]:
    settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url,
                                 query_url=f"http://127.0.0.1:{free_port()}",
                                 max_queue_depth=1_000_000)
    client = redis.asyncio.Redis.from_url(settings.redis_url)
    await reset(client)
    await client.aclose()
    base, asked = labelled(args.sample)
    logs = changelogs(int(args.changelog_mb * 1_000_000))
    docs, spans = namespaces(base, logs, tuple(args.variants))
    print(f"{len(logs)} changelogs, {sum(len(d.text) for d in logs):,} characters; joined "
          f"memory of {len(spans)} paragraphs, {spans[-1][1]:,} characters", flush=True)
    owners, seconds, graphed = await ingest(settings, docs, args.workers)
    print(f"{len(docs)} documents searchable in {seconds:.0f}s, entities in {graphed:.0f}s",
          flush=True)
    joined = next((m for (ns, m), ids in owners.items()
                   if ns == "mixed-joined" and JOINED in ids), None)
    context = {"docs": docs, "owners": owners, "spans": spans, "joined": joined}
    rows = []
    for cap in args.caps:
        hits.MAX_PER_MEMORY = cap  # the query service runs in this process
        with ThreadedServer(build_app(settings), port=free_port()) as server:
            async with httpx2.AsyncClient(base_url=server.url, timeout=120) as http:
                for variant in args.variants:
                    for mode in args.modes:
                        dumped: list[dict] | None = [] if args.dump else None
                        row = {"variant": variant, "cap": cap, "mode": mode,
                               **await measure(http, asked, variant, mode, context, dumped)}
                        rows.append(row)
                        print(json.dumps(row), flush=True)
                        if args.dump:
                            args.dump.mkdir(parents=True, exist_ok=True)
                            (args.dump / f"{variant}-{cap}-{mode}.json").write_text(
                                json.dumps(dumped))
    return rows


def table(rows: list[dict]) -> str:
    header = list(rows[0])
    return "\n".join([" | ".join(header), *(" | ".join(str(r[h]) for h in header)
                                            for r in rows)])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--caps", nargs="+", type=int, default=[0, 3, 5])
    parser.add_argument("--changelog-mb", type=float, default=2.0)
    parser.add_argument("--modes", nargs="+", default=list(SEARCH_MODES), choices=SEARCH_MODES)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS,
                        help="ingest and ask only these namespaces")
    parser.add_argument("--dump", type=Path, help="write each question's top 10 here (JSON)")
    parser.add_argument("--sample", type=int, default=0,
                        help="only this many HotpotQA questions and no LoCoMo (a smoke run)")
    args = parser.parse_args()
    async with cached_store() as url:
        rows = await run(args, url)
    print()
    print(table(rows))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "mixed.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
