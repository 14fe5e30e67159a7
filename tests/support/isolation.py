"""Scoped tokens against every tool, resource and prompt, on every namespace: the matrix that
tests/integration/test_isolation.py asserts on and ``./dev bench isolation`` prints.

Three tokens over five namespaces (three hold memories, two were never written). Each token
calls everything on each namespace: the reads first, then the writes. A call outside the
token's scope must be refused, write nothing, and say nothing of whether the namespace (or the
task) exists: its answer, with the namespace and ids replaced by placeholders, is the same on
every out-of-scope namespace. A read inside the scope must answer exactly what the shared
token (every namespace) answers; a write inside it must be accepted where the shared token's
would be.
"""

from __future__ import annotations

import json
import re
import secrets
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio
from fastmcp import Client

from tests.support import mcp
from tests.support.workers import run_workers
from zapomni.shared.protocol.scopes import is_entry, make_scope
from zapomni.shared.settings import Settings

NAMESPACES = ["team-a-one", "team-a-two", "team-b", "shared", "empty"]
SEEDED = ["team-a-one", "team-b", "shared"]  # team-a-two and empty were never written
# token name -> (namespaces, write)
SCOPES = {"team-a": (["team-a-*"], True), "reader": (["team-b", "shared"], False),
          "shared": (["shared", "empty"], True)}
TOKENS = {name: secrets.token_hex(24) for name in SCOPES}
ADMIN = secrets.token_hex(24)
TEXT = "The lighthouse keeper on Skarv island paints the tower red and white every spring."
# fields that differ between two identical reads (when it ran, how long it took)
VOLATILE = re.compile(r"_ms$|seconds|^took|^elapsed|^updated_at$|^now$")


def tokens_setting() -> str:
    """ZAPOMNI_MCP_TOKENS for the three tokens."""
    return json.dumps({TOKENS[name]: {"namespaces": entries, "write": write}
                       for name, (entries, write) in SCOPES.items()})


def covers(token: str, namespace: str) -> bool:
    entries, write = SCOPES[token]
    assert all(is_entry(e) for e in entries)
    return make_scope(entries, write).covers(namespace)


@dataclass
class Seeds:
    memory: dict[str, str] = field(default_factory=dict)  # namespace -> a memory to read
    victim: dict[str, str] = field(default_factory=dict)  # namespace -> a memory to delete
    task: dict[str, str] = field(default_factory=dict)  # namespace -> a queued graph task


@dataclass
class Call:
    token: str
    namespace: str
    kind: str  # tool, resource or prompt
    name: str
    writes: bool
    arguments: dict[str, Any]

    @property
    def in_scope(self) -> bool:
        return covers(self.token, self.namespace)

    @property
    def allowed(self) -> bool:
        return self.in_scope and (not self.writes or SCOPES[self.token][1])


@dataclass
class Answer:
    call: Call
    error: bool
    text: str  # the error's text, or the answer as JSON
    wrote: bool  # Redis holds more jobs, task records or memory claims than before


def missing_ids(namespace: str) -> tuple[str, str]:
    """A memory id and a task id that exist nowhere, for the namespaces never written."""
    return "mem_" + secrets.token_hex(16), "task_" + secrets.token_hex(16)


def tool_arguments(namespace: str, seeds: Seeds, root: str) -> dict[str, dict[str, Any]]:
    unknown_memory, unknown_task = missing_ids(namespace)
    memory = seeds.memory.get(namespace, unknown_memory)
    task = seeds.task.get(namespace, unknown_task)
    text = f"{namespace} note {secrets.token_hex(4)}: the ferry leaves at nine."
    return {
        "search_memory": {"query": "lighthouse keeper", "namespace": namespace},
        "get_memory": {"memory_id": memory, "namespace": namespace},
        "get_stats": {"namespace": namespace},
        "search_entities": {"query": "Skarv", "namespace": namespace},
        "get_entity": {"name_or_id": "Skarv", "namespace": namespace},
        "list_memories": {"namespace": namespace},
        "get_history": {"thread": "chat", "namespace": namespace},
        "build_context": {"query": "lighthouse", "thread": "chat", "namespace": namespace},
        "graph_status": {"task_id": task},
        "add_memory": {"text": text, "namespace": namespace},
        "add_memories": {"items": [{"text": text + " (batch)"}], "namespace": namespace},
        "update_memory": {"memory_id": memory, "metadata": {"tags": ["checked"]},
                          "namespace": namespace},
        "build_graph": {"namespace": namespace},
        "ingest_path": {"path": root, "namespace": namespace},
        "reembed": {"namespace": namespace},
        "cancel_task": {"task_id": task},
        "delete_memory": {"memory_id": seeds.victim.get(namespace, unknown_memory),
                          "namespace": namespace},
    }


def resource_uris(namespace: str, seeds: Seeds) -> list[str]:
    memory = seeds.memory.get(namespace, missing_ids(namespace)[0])
    return [f"memory://{namespace}/stats", f"memory://{namespace}/recent",
            f"memory://{namespace}/{memory}"]


PROMPTS = {"recall": {"topic": "the lighthouse"}, "save_conversation": {"thread": "chat"},
           "summarise_namespace": {}}


class Matrix:
    """The clients (one per token, and the shared token's) and Redis, for one run."""

    def __init__(self, url: str, redis_url: str, queue_name: str) -> None:
        self.url = url
        self.redis = redis.asyncio.Redis.from_url(redis_url)
        self.queue_name = queue_name
        self.clients = {name: Client(url, auth=token) for name, token in TOKENS.items()}
        self.admin = Client(url, auth=ADMIN)
        self.answers: list[Answer] = []

    async def __aenter__(self) -> Matrix:
        for client in [*self.clients.values(), self.admin]:
            await client.__aenter__()
        return self

    async def __aexit__(self, *exc) -> None:
        for client in [*self.clients.values(), self.admin]:
            await client.__aexit__(None, None, None)
        await self.redis.aclose()

    async def writes(self) -> tuple[int, int, int]:
        """Jobs queued, task records, memory claims: what an accepted write leaves."""
        r = self.redis
        return (await r.zcard(self.queue_name),
                len([k async for k in r.scan_iter(match="zapomni:task:*", count=1000)]),
                len([k async for k in r.scan_iter(match="zapomni:mem:*", count=1000)]))

    async def send(self, client: Client, call: Call) -> tuple[bool, str]:
        try:
            if call.kind == "tool":
                result = await client.call_tool(call.name, call.arguments, raise_on_error=False)
                if result.is_error:
                    return True, result.content[0].text
                return False, json.dumps(result.structured_content, sort_keys=True)
            if call.kind == "resource":
                contents = await client.read_resource(call.name)
                return False, contents[0].text
            prompt = await client.get_prompt(call.name, call.arguments)
            return False, prompt.messages[0].content.text
        except Exception as exc:  # the client raises a resource's or prompt's refusal
            return True, str(exc)

    async def run(self, call: Call) -> Answer:
        before = await self.writes()
        error, text = await self.send(self.clients[call.token], call)
        answer = Answer(call, error, text, await self.writes() != before)
        self.answers.append(answer)
        return answer

    async def reference(self, call: Call) -> tuple[bool, str]:
        """What the shared token answers to the same read."""
        return await self.send(self.admin, call)


async def seed(matrix: Matrix, settings: Settings) -> Seeds:
    """With the shared token: a memory to read and one to delete in each seeded namespace,
    ingested by a worker, then a graph task left queued (for graph_status and cancel_task)."""
    seeds = Seeds()
    for namespace in SEEDED:
        kept = await mcp.answer(matrix.admin, "add_memory", {
            "text": TEXT, "metadata": {"thread": "chat"}, "namespace": namespace})
        victim = await mcp.answer(matrix.admin, "add_memory", {
            "text": f"A note of {namespace} to delete.", "namespace": namespace})
        seeds.memory[namespace], seeds.victim[namespace] = kept["memory_id"], victim["memory_id"]
    await run_workers(settings)
    for namespace in SEEDED:
        task = await mcp.answer(matrix.admin, "build_graph", {"namespace": namespace})
        seeds.task[namespace] = task["task_id"]
    return seeds


async def run_matrix(matrix: Matrix, seeds: Seeds, root: str) -> Verdict:
    """Every call of ``calls``, each in-scope read also by the shared token; the verdict."""
    tools = {t.name: not t.annotations.read_only_hint for t in await matrix.admin.list_tools()}
    references = {}
    for call in calls(tools, seeds, root):
        await matrix.run(call)
        if call.allowed and not call.writes:
            references[len(matrix.answers) - 1] = await matrix.reference(call)
    return judge(matrix.answers, references)


def calls(tools: dict[str, bool], seeds: Seeds, root: str) -> list[Call]:
    """Every tool (name -> whether it writes), resource and prompt, by every token on every
    namespace: all the reads, then the writes (cancel_task and delete_memory last)."""
    out = []
    for token in SCOPES:
        for namespace in NAMESPACES:
            arguments = tool_arguments(namespace, seeds, root)
            assert set(arguments) == set(tools), set(arguments) ^ set(tools)
            out += [Call(token, namespace, "tool", name, tools[name], arguments[name])
                    for name in arguments]
            out += [Call(token, namespace, "resource", uri, False, {})
                    for uri in resource_uris(namespace, seeds)]
            out += [Call(token, namespace, "prompt", name, False,
                         {**args, "namespace": namespace}) for name, args in PROMPTS.items()]
    order = list(tool_arguments("x", seeds, root))
    return sorted(out, key=lambda c: (c.writes, order.index(c.name) if c.kind == "tool"
                                      else -1))


def masked(answer: Answer) -> str:
    """The answer with its namespace and any ids replaced: what must not differ between an
    out-of-scope namespace that exists and one that does not."""
    text = answer.text.replace(answer.call.namespace, "<namespace>")
    return re.sub(r"(mem|task)_[0-9a-f]{32}", r"\1_<id>", text)


def without_volatile(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return text

    def strip(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if not VOLATILE.search(k)}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v
    return strip(value)


@dataclass
class Verdict:
    calls: int = 0
    out_of_scope: int = 0
    out_of_scope_succeeded: list[str] = field(default_factory=list)
    refused_but_wrote: list[str] = field(default_factory=list)
    revealing: list[str] = field(default_factory=list)  # answers that differ by existence
    in_scope_refused: list[str] = field(default_factory=list)
    in_scope_writes_failed: list[str] = field(default_factory=list)
    in_scope_differs: list[str] = field(default_factory=list)
    outcomes: Counter = field(default_factory=Counter)

    def summary(self) -> dict[str, Any]:
        return {"calls": self.calls, "out_of_scope_calls": self.out_of_scope,
                "out_of_scope_succeeded": len(self.out_of_scope_succeeded),
                "answers_revealing_existence": len(self.revealing),
                "refused_but_wrote": len(self.refused_but_wrote),
                "in_scope_refused": len(self.in_scope_refused),
                "in_scope_writes_failed": len(self.in_scope_writes_failed),
                "in_scope_reads_differing": len(self.in_scope_differs),
                "outcomes": dict(self.outcomes)}


REFUSALS = re.compile(r"is not covered by this token|this token may only read|not found")


def judge(answers: list[Answer], references: dict[int, tuple[bool, str]]) -> Verdict:
    """``references``: the shared token's answer to each in-scope read, by answer index."""
    verdict = Verdict(calls=len(answers))
    groups: dict[tuple[str, str, str], set[str]] = {}
    for i, answer in enumerate(answers):
        call = answer.call
        where = f"{call.token} {call.kind} {call.name} on {call.namespace}"
        verdict.outcomes["allowed" if call.allowed else "refused"] += 1
        if not call.allowed:
            verdict.out_of_scope += not call.in_scope
            if not answer.error or not REFUSALS.search(answer.text):
                verdict.out_of_scope_succeeded.append(f"{where}: {answer.text[:200]}")
            if answer.wrote:
                verdict.refused_but_wrote.append(where)
            key = (call.token, call.kind, call.name if call.kind != "resource"
                   else call.name.rsplit("/", 1)[-1] if call.name.endswith(("stats", "recent"))
                   else "memory")
            groups.setdefault(key, set()).add(masked(answer))
            continue
        if answer.error and re.search(r"not covered by this token|may only read", answer.text):
            verdict.in_scope_refused.append(f"{where}: {answer.text[:200]}")
        elif answer.error and call.writes and call.namespace in SEEDED:
            verdict.in_scope_writes_failed.append(f"{where}: {answer.text[:200]}")
        if i in references and without_volatile(references[i][1]) != without_volatile(
                answer.text):
            verdict.in_scope_differs.append(f"{where}: {answer.text[:150]} != "
                                            f"{references[i][1][:150]}")
    verdict.revealing = [f"{key}: {sorted(texts)}" for key, texts in groups.items()
                         if len(texts) > 1]
    return verdict
