"""People and places on chat: a generated chat set and a new user's short chat, ingested through
real worker processes, judged against what the generator wrote.

    ./dev bench chat [--people 80] [--conversations 90] [--seed 35]

The generated set (``generate``; seeded, nothing read from outside): conversations between a
user and an assistant about friends, each with a full name, a city they live in and a place
they work at. A friend is named in full the first time a conversation mentions them, then by
first name or surname alone (a one-word reference; never one that two friends share), and
friends move from one city to another. Cities are written as a user would: Kraków, Krakow or
Cracow. Some first names and surnames are also cities (Sofia, Victoria, Jackson); some
friends share a first name; workplaces (organisations) and landmarks that no gazetteer of
cities has (Ojców National Park) are there too. The new user's chat (``NEW_USER``) is the
one issue 35 was filed with, judged by hand below it.

Printed for each set: entity types right among those shown (a type other than "unknown";
person or place against the generator's truth; a name the generator never wrote as a person
or place — an organisation, a landmark, a stray span — is wrong with any type), how many
people came out as more than one entity visible to search_entities, wrong merges (an alias
to another person), and the count of each type shown. Writes tests/bench/results/chat.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
from collections import Counter
from dataclasses import dataclass, field

import redis.asyncio

from tests.bench.retrieval import RESULTS, Doc, cached_store, ingest, reset
from zapomni.services.query.entities import search_entities
from zapomni.shared.protocol.api import EntitySearch
from zapomni.shared.settings import Settings
from zapomni.shared.store.graphstore import GraphStore, run
from zapomni.shared.text.entities import entity_key

_FIRST = """Marta Anna Katarzyna Piotr Tomasz Agnieszka Magdalena Zofia Jakub Michał Paweł Ewa
Krzysztof Aleksandra Natalia Joanna Wojciech Łukasz Barbara Marek Sofia Victoria Florence
Adam Martin David Lucas Olivia Emma Noah Liam Sophie Lena Hanna Clara Diego Carlos Lucia Elena
Mateo Hugo Oscar Felix Simon Ingrid Astrid Henrik Lars Nils Freya Amelia Oliver Harry George
Isla Chloe Ruby Jack Leo Arthur Mia Maja Oskar Igor Wiktor Julian Dorota Grażyna Bożena
Jarosław Bartosz Kamil Daria Nadia Irena Renata"""
_LAST = """Kowalczyk Nowak Kowalski Wiśniewska Wójcik Lewandowski Zielińska Szymański Woźniak
Dąbrowska Kozłowski Jankowska Mazur Krawczyk Piotrowski Grabowska Pawlak Michalski Król
Wieczorek Jabłońska Majewski Olszewska Stępień Malinowski Jaworska Adamczyk Dudek Nowicka
Pietrzak Walczak Sikora Baran Rutkowski Michalak Ostrowska Tomaszewski Zalewska Jasińska
Jackson Lincoln Wilson Nelson Parker Hughes Fletcher Holmes Whitaker Lindqvist Andersson
Johansson Eriksen Novak Horvat Moreau Lefebvre Rossi Bianchi Ferreira Oliveira Schmidt
Becker Hoffmann Weber Fischer Keller Brandt Vogel Hartmann Lorenz Fuchs Berger Krüger
Sokołowska Górski Kaczmarek Zawadzka Chmielewski Borkowska Czarnecki Sadowska Bąk Kubiak
Wróblewski Ziółkowska Sawicki Kalinowska Lis Mazurek"""
FIRST, LAST = _FIRST.split(), _LAST.split()
# (name as usually written, other spellings a user may use)
CITIES = [("Kraków", "Krakow", "Cracow"), ("Warsaw", "Warszawa"), ("Gdańsk", "Gdansk"),
          ("Wrocław", "Wroclaw"), ("Poznań", "Poznan"), ("Łódź", "Lodz"), ("Lublin",),
          ("Katowice",), ("Szczecin",), ("Zakopane",), ("Toruń", "Torun"), ("Berlin",),
          ("Munich", "München"), ("Hamburg",), ("Vienna", "Wien"), ("Prague", "Praha"),
          ("Budapest",), ("Lisbon", "Lisboa"), ("Porto",), ("Madrid",), ("Barcelona",),
          ("Rome", "Roma"), ("Milan", "Milano"), ("Paris",), ("Lyon",), ("London",),
          ("Manchester",), ("Edinburgh",), ("Dublin",), ("Amsterdam",), ("Copenhagen",),
          ("Oslo",), ("Stockholm",), ("Helsinki",), ("Vilnius",), ("Riga",), ("Boston",),
          ("Chicago",), ("Toronto",), ("Montreal",), ("Seattle",), ("Sydney",)]
COUNTRIES = ["Poland", "Germany", "Portugal", "Spain", "Italy", "France", "Norway", "Sweden",
             "Ireland", "Canada", "Japan", "Greece", "Croatia", "Iceland"]
PLACES_NO_GAZETTEER = ["Ojców National Park", "Tatra Mountains", "Wawel Castle",
                       "Old Town Square", "Bieszczady Mountains", "Lake Como"]
ORGS = ["Allegro", "CD Projekt", "Siemens", "Nordea", "Volvo", "Spotify", "Deloitte", "IKEA",
        "Orlen", "Revolut", "Booking.com", "Ericsson"]
MONTHS = ["January", "March", "April", "June", "September", "October", "November"]


@dataclass
class Person:
    first: str
    last: str
    city: tuple[str, ...]
    work: str
    one_word: list[str] = field(default_factory=list)  # the one-word references allowed

    @property
    def full(self) -> str:
        return f"{self.first} {self.last}"


@dataclass
class Truth:
    """What the generator wrote: entity key -> "person" / "place" / "other", and for a
    person's names, key -> the person's full name."""

    kinds: dict[str, str] = field(default_factory=dict)
    people: dict[str, str] = field(default_factory=dict)

    def person(self, name: str, *keys: str) -> None:
        for key in (entity_key(name), *keys):
            self.kinds[key] = "person"
            self.people[key] = name

    def place(self, *names: str) -> None:
        self.kinds.update({entity_key(n): "place" for n in names})


def make_people(rng: random.Random, count: int) -> list[Person]:
    firsts = rng.sample(FIRST, k=count * 3 // 4)
    firsts += rng.sample(firsts, k=count - len(firsts))  # some friends share a first name
    lasts = rng.sample(LAST, k=count)
    people = [Person(f, s, rng.choice(CITIES), rng.choice(ORGS)) for f, s in zip(
        firsts, lasts, strict=True)]
    shared = Counter(firsts)
    for p in people:
        p.one_word = [p.first] * (shared[p.first] == 1) + [p.last]
    return people


def city(rng: random.Random, place: tuple[str, ...]) -> str:
    """A city as a user writes it: mostly its usual name, sometimes another spelling."""
    return place[0] if len(place) == 1 or rng.random() < 0.6 else rng.choice(place[1:])


def conversation(rng: random.Random, pair: list[Person]) -> list[str]:
    a, b = pair
    month, country = rng.choice(MONTHS), rng.choice(COUNTRIES)
    there, new = city(rng, a.city), rng.choice(CITIES)
    lines = [f"user: My friend {a.full} lives in {there} and works at {a.work}.",
             f"assistant: How is {rng.choice(a.one_word)} finding {there}?",
             f"user: {rng.choice(a.one_word)} says {there} is lovely in spring.",
             f"user: Last week I had coffee with {b.full} in {city(rng, b.city)}.",
             f"assistant: Is {rng.choice(b.one_word)} still working at {b.work}?",
             f"user: {b.full} moved from {city(rng, b.city)} to {city(rng, new)} in {month}.",
             f"assistant: Did {rng.choice(b.one_word)} like {city(rng, new)}?",
             f"user: {rng.choice(a.one_word)} and I are planning a trip to {country}.",
             f"user: We want to see {rng.choice(PLACES_NO_GAZETTEER)} on the way.",
             f"assistant: Say hello to {rng.choice(a.one_word)} from me."]
    b.city = new  # friends move: the next conversation finds them in the new city
    start = rng.randrange(0, 2)
    return lines[start:] if start else lines


def generate(seed: int, people_count: int, conversations: int) -> tuple[list[Doc], Truth]:
    rng = random.Random(seed)
    people = make_people(rng, people_count)
    truth = Truth()
    for name in PLACES_NO_GAZETTEER:
        truth.place(name)
    for place in CITIES:
        truth.place(*place)
    truth.place(*COUNTRIES)
    truth.kinds.update({entity_key(o): "other" for o in ORGS})
    for p in people:
        truth.person(p.full, *(entity_key(w) for w in p.one_word))
    docs = []
    for i in range(conversations):
        pair = rng.sample(people, k=2)
        docs.append(Doc(id=f"chat{i}", text="\n".join(conversation(rng, pair)),
                        namespace="chatgen"))
    return docs, truth


NEW_USER = """user: Hi! I'm planning a weekend trip with my friend Marta Kowalczyk. We both live in Kraków.
assistant: Nice! Kraków is a great base. Where would you like to go?
user: Marta suggested Ojców National Park, it's close to Kraków. She went there last spring with Tomasz Nowak.
assistant: Ojców National Park is about 25 km north of Kraków. Does Tomasz want to come too?
user: Tomasz moved to Warsaw in May, so probably not. Marta said she'd ask him anyway.
user: Also, Kasia Wiśniewska from Gdańsk might join us. Kasia loves hiking.
assistant: Great. Marta, Kasia and you could take the bus from Kraków to Ojców.
user: Marta Kowalczyk booked a room in Zakopane for Sunday too."""  # noqa: E501


def new_user_truth() -> Truth:
    truth = Truth()
    truth.person("Marta Kowalczyk", "marta")
    truth.person("Tomasz Nowak", "tomasz")
    truth.person("Kasia Wiśniewska", "kasia")
    truth.place("Kraków", "Warsaw", "Gdańsk", "Zakopane", "Ojców National Park", "Ojców")
    return truth


ENTITIES = """
MATCH (e:Entity) WHERE NOT (e)-[:SAME_AS]->(:Entity)
RETURN e.key, e.name, e.type ORDER BY e.key LIMIT 100000
"""
ALIASES = "MATCH (a:Entity)-[:SAME_AS]->(p:Entity) RETURN a.key, p.key LIMIT 100000"


async def judge(store: GraphStore, namespace: str, truth: Truth) -> dict:
    graph = store.graph(namespace)
    shown = await run(graph, ENTITIES, read_only=True)
    types = Counter(kind for _, _, kind in shown)
    judged = [(key, kind, truth.kinds.get(key, "other")) for key, _, kind in shown
              if kind != "unknown"]
    wrong = [f"{key}: {kind} (is {real})" for key, kind, real in judged if kind != real]
    split = []
    for full in sorted(set(truth.people.values())):
        found = await search_entities(store, EntitySearch(query=full, namespace=namespace,
                                                          limit=100))
        mine = {hit.name for hit in found.results
                if truth.people.get(entity_key(hit.name)) == full}
        if len(mine) > 1:
            split.append(sorted(mine))
    aliases = await run(graph, ALIASES, read_only=True)
    wrong_merges = [f"{a} -> {p}" for a, p in aliases
                    if truth.people.get(a) is None or truth.people.get(a) != truth.people.get(p)]
    real = Counter(truth.kinds[key] for key, _, _ in shown if key in truth.kinds)
    return {"entities_shown": len(shown), "typed": len(judged),
            "types_right": round(1 - len(wrong) / max(1, len(judged)), 3),
            "types": dict(types), "true_people_places_found": dict(real),
            "people": len(set(truth.people.values())), "people_split": len(split),
            "aliases": len(aliases), "wrong_merges": wrong_merges, "wrong_types": wrong,
            "split": split}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--people", type=int, default=80)
    parser.add_argument("--conversations", type=int, default=90)
    parser.add_argument("--seed", type=int, default=35)
    args = parser.parse_args()
    docs, truth = generate(args.seed, args.people, args.conversations)
    docs.append(Doc(id="new_user", text=NEW_USER, namespace="newuser"))
    result = {"people": args.people, "conversations": args.conversations, "seed": args.seed}
    async with cached_store() as url:
        settings = Settings.from_env(environ={}, redis_url=f"{url}/0", falkordb_url=url,
                                     max_queue_depth=1_000_000)
        client = redis.asyncio.Redis.from_url(settings.redis_url)
        await reset(client)
        await client.aclose()
        _, searchable, graphed = await ingest(settings, docs, workers=1)
        print(f"{len(docs)} chats searchable in {searchable:.1f}s, graph read in "
              f"{graphed:.1f}s", flush=True)
        store = GraphStore(settings)
        try:
            for name, namespace, judged in (("generated", "chatgen", truth),
                                            ("new_user", "newuser", new_user_truth())):
                result[name] = await judge(store, namespace, judged)
                summary = {k: v for k, v in result[name].items()
                           if k not in ("wrong_types", "split", "wrong_merges")}
                print(name, json.dumps(summary, ensure_ascii=False), flush=True)
        finally:
            await store.aclose()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "chat.json").write_text(json.dumps(result, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    asyncio.run(main())
