"""Isolation under random multi-tenant, multi-user workloads (property-based).

Several tenants, users and conversations share one SQLite file, one engine (one
block cache) and two `Conversations` over that file (two processes, one of them
often cold). Ids are drawn to hold ``/``, ``:``, ``%`` and other unicode, so that
ids joined into one string would collide. Every user has a secret that is in
everything they write (messages, a large tool result that is offloaded, their
memories); every tenant has a secret knowledge passage. Whatever a user gets
back — a build, a read-back, a compaction (preview or not), a memory search, a
knowledge search — holds no other user's and no other tenant's secret, and every
access to another user's conversation raises `InvalidMessageError` naming
``user``, writing nothing.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from contextwright import (
    ContextEngine,
    Conversations,
    HeuristicCounter,
    InvalidMessageError,
    Message,
    Scope,
    ToolCallPart,
    UserError,
)
from contextwright.history import CompactionConfig
from contextwright.knowledge import SQLiteKnowledgeStore
from contextwright.memory import SQLiteMemoryStore
from contextwright.sources import Turn, UserMemorySource
from contextwright.stores import SQLiteStore

H = HeuristicCounter()
# Ids that collide when joined with "/" or ":" — ("t", "u", "u/z") and ("t/u", "u", "z").
TRICKY = ["t", "t/u", "u", "u/u", "u/z", "z", "t:u", "u:z", ":", "/", "%2F", "默认", "ü/"]
IDS = st.one_of(
    st.sampled_from(TRICKY),
    st.text(
        st.characters(exclude_categories=("Cs",), exclude_characters="\x00"),
        min_size=1,
        max_size=6,
    ),
)
OPS = ["append", "build", "read_back", "compact", "check", "messages", "memory", "knowledge"]
# (operation, principal, conversation, flag, which Conversations)
STEPS = st.lists(
    st.tuples(
        st.sampled_from(OPS),
        st.integers(0, 8),
        st.integers(0, 2),
        st.booleans(),
        st.integers(0, 1),
    ),
    min_size=1,
    max_size=12,
)
QUERY = "vault code word?"


def _thread(secret: str, n: int) -> list[Message]:
    """One exchange of a user: the secret in the question, a large tool result, the answer."""
    call = ToolCallPart(f"call_{n}", "search", json.dumps({"q": "vault"}))
    rows = json.dumps([{"row": r, "note": f"vault code word {secret}"} for r in range(120)])
    return [
        Message.user(f"vault code word {secret}, remember it"),
        Message.assistant("Let me look.", tool_calls=[call]),
        Message.tool(call.id, rows, tool_name="search"),
        Message.assistant(f"The vault code word is {secret}."),
    ]


class Workload:
    """The system under test, and the model of who owns what."""

    def __init__(self, root: Path, tenants: list[str], users: list[str], convs: list[str]):
        self.principals = [(t, u) for t in tenants for u in users]
        self.convs = convs
        self.secret = {p: f"qzx{i:03d}kv" for i, p in enumerate(self.principals)}
        self.knowledge_secret = {t: f"kqz{i:03d}vx" for i, t in enumerate(tenants)}
        path = root / "iso.db"
        self.memory = SQLiteMemoryStore(path)
        self.knowledge = {t: SQLiteKnowledgeStore(path, tenant=t) for t in tenants}
        for p in self.principals:
            self.memory.add(Scope(*p), f"vault code word {self.secret[p]}")
        for t, k in self.knowledge.items():
            k.add(f"the tenant's vault code word is {self.knowledge_secret[t]}", source="vault")
        engine = ContextEngine(
            counter=H, budget=3000, sources=[UserMemorySource(store=self.memory)]
        )
        config = CompactionConfig.preset("development")
        self.sides = [Conversations(engine, SQLiteStore(path), compaction=config) for _ in "ab"]
        self.owner: dict[tuple[str, str], str] = {}  # (tenant, conversation) -> user
        self.keys: dict[tuple[str, str], list[str]] = {}  # offloaded tool results
        self.calls = 0

    def close(self) -> None:
        for c in self.sides:
            c.close()
        self.memory.close()
        for k in self.knowledge.values():
            k.close()

    def foreign(self, principal: tuple[str, str]) -> list[str]:
        """The secrets ``principal`` must never see."""
        return [s for p, s in self.secret.items() if p != principal] + [
            s for t, s in self.knowledge_secret.items() if t != principal[0]
        ]

    def step(self, op: str, who: int, conv: int, flag: bool, side: int) -> None:
        tenant, user = p = self.principals[who % len(self.principals)]
        cid = self.convs[conv % len(self.convs)]
        c = self.sides[side]
        owner = self.owner.get((tenant, cid))
        allowed = owner is None or owner == user
        kw = {"tenant": tenant, "user": user}
        out: object = None
        try:
            if op == "append":
                self.calls += 1
                c.append_sync(cid, _thread(self.secret[p], self.calls), **kw)
                self.keys.setdefault((tenant, cid), []).append(f"tool:call_{self.calls}")
                self.owner[(tenant, cid)] = user
            elif op == "build":
                built = c.build_sync(cid, QUERY, store_message=flag, **kw)
                out = built.render("openai")
                if flag:
                    self.owner[(tenant, cid)] = user
            elif op == "read_back":
                keys = self.keys.get((tenant, cid)) or ["tool:call_0"]
                out = c.read_back_sync(cid, keys[-1] if flag else keys[0], 1, **kw)
            elif op == "compact":
                try:
                    result = c.compact_sync(cid, preview=flag, **kw)
                except InvalidMessageError:
                    raise
                except UserError:  # no such conversation
                    assert owner is None
                    return
                assert owner is not None
                out = [result.summary, [m.text for m in result.compacted_messages]]
            elif op == "check":
                out = c.check_sync(cid, **kw)
            elif op == "messages":
                out = [m.to_dict() for m in c.messages_sync(cid, **kw)]
            elif op == "memory":
                scope = Scope(tenant, user)
                hits = asyncio.run(self.memory.search(scope, QUERY, 10))
                out = [h.memory.content for h in hits]
                out += [m.content for m in asyncio.run(self.memory.top(scope, 10))]
                assert self.secret[p] in json.dumps(out), "a user's own memory is found"
            elif op == "knowledge":
                hits = self.knowledge[tenant].search_sync(QUERY, limit=5)
                out = [h.passage.content for h in hits]
                assert self.knowledge_secret[tenant] in json.dumps(out)
        except InvalidMessageError as exc:
            assert exc.where == "user", exc
            assert not allowed, f"{op} by the owner {p} of {cid!r} refused: {exc}"
            return
        assert allowed or op in ("memory", "knowledge"), f"{op} by {p} of another's {cid!r}"
        text = json.dumps(out, ensure_ascii=False, default=repr)
        for secret in self.foreign(p):
            assert secret not in text, f"{op} by {p} on {cid!r} returned {secret}"


@st.composite
def _lookalikes(draw: st.DrawFn) -> tuple[tuple[str, str, str], tuple[str, str, str]]:
    """Two (tenant, user, conversation): the same ids and separators, cut in two places."""
    atoms = draw(st.lists(IDS, min_size=3, max_size=6))
    sep = draw(st.sampled_from(["/", ":", "%2F"]))

    def cut() -> tuple[str, str, str]:
        i, j = sorted(
            draw(st.lists(st.integers(1, len(atoms) - 1), min_size=2, max_size=2, unique=True))
        )
        return sep.join(atoms[:i]), sep.join(atoms[i:j]), sep.join(atoms[j:])

    return cut(), cut()


@given(_lookalikes())
def test_every_tenant_user_and_conversation_has_a_cache_namespace_of_its_own(pair):
    # ("t", "u", "u/z") and ("t/u", "u", "z") had one namespace, and one user's cached
    # memory block was served to the other; ("t", "u/v") and ("t/u", "v") one tag.
    (a, b) = [Turn(Message.user("hi"), tenant=t, user=u, conversation=c) for t, u, c in pair]
    assert (a.namespace == b.namespace) == (pair[0] == pair[1])
    source = UserMemorySource()
    same_user = pair[0][:2] == pair[1][:2]
    assert (set(source.cache_tags(a)) == set(source.cache_tags(b))) == same_user


@st.composite
def _ids(draw: st.DrawFn) -> tuple[list[str], list[str], list[str]]:
    """Tenants, users and conversations: random, or two lookalikes and their mixes."""
    if draw(st.booleans()):
        return tuple(draw(st.lists(IDS, min_size=1, max_size=3, unique=True)) for _ in "tuc")  # type: ignore[return-value]
    pair = draw(_lookalikes())
    return tuple(sorted({p[k] for p in pair}) for k in range(3))  # type: ignore[return-value]


@settings(max_examples=40, deadline=None)
@given(_ids(), STEPS)
# the cache namespace of ("t", "u", "u/z") was that of ("t/u", "u", "z")
@example(
    (["t", "t/u"], ["u"], ["u/z", "z"]), [("build", 1, 1, False, 0), ("build", 0, 0, False, 0)]
)
# another user of the tenant: a build without storing, a read-back, a compaction preview
@example(
    (["t"], ["a", "b"], ["c"]),
    [
        ("append", 0, 0, False, 0),
        ("build", 1, 0, False, 0),
        ("read_back", 1, 0, False, 1),
        ("compact", 1, 0, True, 0),
        ("compact", 1, 0, False, 1),
        ("build", 0, 0, False, 1),
    ],
)
def test_no_user_or_tenant_sees_another_s_data(ids, steps):
    tenants, users, convs = ids
    root = Path(tempfile.mkdtemp())
    work = Workload(root, tenants, users, convs)
    try:
        for step in steps:
            work.step(*step)
            for c in work.sides:  # background summaries land before the next step
                c.wait_idle_sync()
        # nothing another user tried was written: each conversation holds its owner's only
        store = work.sides[0].store
        for (tenant, cid), user in work.owner.items():
            stored = json.dumps([m.text for m in store.read(cid, tenant=tenant)])
            for secret in work.foreign((tenant, user)):
                assert secret not in stored
            for summary in store.summaries(cid, tenant=tenant):
                assert all(s not in summary.content for s in work.foreign((tenant, user)))
    finally:
        work.close()
        shutil.rmtree(root, ignore_errors=True)
