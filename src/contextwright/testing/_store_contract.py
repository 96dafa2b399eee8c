"""`StoreContract`: the behaviour every store backend must show, as test methods.

A backend's test module subclasses it and says how to open the backend::

    class TestMyBackend(StoreContract):
        def open_backend(self, directory, clock):
            return MyBackend(directory / "db", clock=clock).backend()

pytest collects the subclass (its name starts with ``Test``); each test opens
a fresh backend in a fresh temporary directory, runs against it on its own
event loop, and closes it. The property tests need ``hypothesis`` and are left
out without it; nothing here needs pytest.

What the suite pins down: the tenant is part of every key (the same ids in two
tenants never mix), a conversation belongs to its first writer, sequence numbers
run 1..n without gaps, reads honour ranges, limits and order, the tail honours
its token budget, every write moves the version by exactly one and a rejected
one by nothing, summaries saved against a stale expected version conflict, a
compaction's summary and log entry are written together or not at all, working
memory expires, pins keep their order, search stays inside its tenant and
conversation, and bad input raises a typed error naming the field with nothing
written.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    _HYPOTHESIS = True
    # The same property runs once per backend subclass: hypothesis sees one test
    # called from several classes, which is the point here.
    _EACH_BACKEND = [HealthCheck.differing_executors]
except ImportError:  # pragma: no cover - the property tests are left out
    _HYPOTHESIS = False

from .._errors import ContextwrightError, InvalidMessageError, StoreError, SummaryConflictError
from ..model._messages import Message
from ..model._parts import ToolCallPart
from ..stores._contract import Backend
from ..stores._records import CompactionEntry, Summary
from ._support import ManualClock, Suite, raises, scenario
from ._support import texts as _texts

__all__ = ["StoreContract"]


class StoreContract(Suite[Backend]):
    """The store contract as test methods; subclass and define `open_backend` (module docstring)."""

    def open_backend(self, directory: Path, clock: Callable[[], float]) -> Backend:
        """A fresh, empty backend keeping its files (if any) under ``directory``."""
        raise NotImplementedError

    def open(self, directory: Path, clock: Callable[[], float]) -> Backend:
        return self.open_backend(directory, clock)

    async def close(self, subject: Backend) -> None:
        await subject.aclose()

    # -- conversations, owners, sequence numbers ------------------------------------------

    @scenario
    async def test_a_conversation_belongs_to_its_first_writer(
        self, b: Backend, clock: ManualClock
    ) -> None:
        log = b.conversations
        info = await log.ensure_conversation("c", tenant="t", user="alice", metadata={"k": 1})
        assert (info.id, info.tenant, info.user, info.version) == ("c", "t", "alice", 1)
        assert dict(info.metadata) == {"k": 1}
        await log.append("c", [Message.user("hi")], tenant="t", user="alice")
        for write in (
            log.append("c", [Message.user("mine now")], tenant="t", user="mallory"),
            log.ensure_conversation("c", tenant="t", user="mallory"),
        ):
            with raises(InvalidMessageError, "user"):
                await write
        assert await log.version("c", tenant="t") == 2
        assert _texts(await log.read("c", tenant="t")) == ["hi"]
        # the same id in another tenant is another conversation, with its own owner
        other = await log.append("c", [Message.user("elsewhere")], tenant="u", user="mallory")
        assert other.version == 1
        assert [i.user for i in await log.list_conversations(tenant="u")] == ["mallory"]
        assert [i.id for i in await log.list_conversations(tenant="t", user="mallory")] == []

    @scenario
    async def test_sequence_numbers_run_from_one_without_gaps(
        self, b: Backend, clock: ManualClock
    ) -> None:
        log = b.conversations
        first = await log.append(
            "c", [Message.user(f"m{i}") for i in range(3)], tenant="t", user="u"
        )
        assert [m.seq for m in first.value] == [1, 2, 3]
        retry = [Message.user("r", id="fixed"), Message.user("s")]
        second = await log.append("c", retry, tenant="t", user="u")
        assert [m.seq for m in second.value] == [4, 5]
        again = await log.append("c", retry[:1], tenant="t", user="u")  # a safe retry
        assert [m.seq for m in again.value] == [4]
        assert again.version == second.version  # wrote nothing
        info = await log.get_conversation("c", tenant="t")
        assert info is not None
        assert (info.last_seq, info.message_count) == (5, 5)
        assert [m.seq for m in await log.read("c", tenant="t")] == [1, 2, 3, 4, 5]

    @scenario
    async def test_reads_honour_ranges_limits_and_order(
        self, b: Backend, clock: ManualClock
    ) -> None:
        log = b.conversations
        await log.append(
            "c", [Message.user(f"m{i}") for i in range(1, 11)], tenant="t", user="u",
            tokens=list(range(1, 11)), counter="n",
        )  # fmt: skip
        read = log.read
        assert _texts(await read("c", tenant="t", after_seq=3, upto_seq=6)) == ["m4", "m5", "m6"]
        assert _texts(await read("c", tenant="t", limit=2)) == ["m1", "m2"]
        newest = await read("c", tenant="t", limit=3, newest_first=True)
        assert _texts(newest) == ["m10", "m9", "m8"]
        assert await read("c", tenant="t", after_seq=10) == []
        assert await read("nothing", tenant="t") == []
        assert await log.token_total("c", tenant="t") == (10, 55)
        assert await log.token_total("c", tenant="t", after_seq=8) == (2, 19)
        assert await log.count_messages("c", tenant="t") == 10
        assert await log.count_messages("c", tenant="t", role="assistant") == 0
        assert await log.message_tokens("c", tenant="t", seqs=[1, 5, 99]) == {1: 1, 5: 5}
        assert await log.message_tokens("c", tenant="t", seqs=[1], counter="other") == {}
        outline = await log.read_outline("c", tenant="t", after_seq=8)
        assert [(o.seq, o.role, o.tokens, o.text) for o in outline] == [
            (9, "user", 9, "m9"), (10, "user", 10, "m10")
        ]  # fmt: skip

    @scenario
    async def test_the_tail_is_the_newest_suffix_that_fits(
        self, b: Backend, clock: ManualClock
    ) -> None:
        log = b.conversations
        counts = [5, 1, 4, 2, 3, 2]
        await log.append(
            "c", [Message.user(f"m{i}") for i in range(6)], tenant="t", user="u",
            tokens=counts, counter="n",
        )  # fmt: skip
        tail = await log.read_tail("c", tenant="t", max_tokens=7, counter="n")
        assert _texts(tail) == ["m3", "m4", "m5"]  # 2 + 3 + 2; with m2 (4) it would be 11
        assert await log.read_tail("c", tenant="t", max_tokens=1, counter="n") == []
        assert _texts(await log.read_tail("c", tenant="t", max_tokens=99, after_seq=4, counter="n")) == [
            "m4", "m5"
        ]  # fmt: skip
        # counts by another counter are estimates: the tail is never shorter for them
        other = await log.read_tail("c", tenant="t", max_tokens=7, counter="other")
        assert len(other) >= 3
        await log.set_message_tokens("c", tenant="t", counts={6: 7}, counter="n")
        assert _texts(await log.read_tail("c", tenant="t", max_tokens=7, counter="n")) == ["m5"]
        assert await log.token_total("c", tenant="t") == (6, sum(counts) - 2 + 7)

    # -- versions ---------------------------------------------------------------------------

    @scenario
    async def test_every_write_moves_the_version_by_one(
        self, b: Backend, clock: ManualClock
    ) -> None:
        log = b.conversations
        assert await log.version("c", tenant="t") == 0
        seen = [(await log.append("c", [Message.user("a")], tenant="t", user="u")).version]
        seen.append(await log.set_message_tokens("c", tenant="t", counts={1: 3}, counter="n"))
        seen.append(
            (await b.summaries.save_summary(Summary("c", 0, 1, 1, "s"), tenant="t")).version
        )
        await log.append("c", [Message.user("b")], tenant="t", user="u")
        seen.append(await log.version("c", tenant="t"))
        entry = CompactionEntry(0, "c", clock(), "soft", True, 10, 5, upto_seq=2)
        summary = Summary("c", 0, 1, 2, "s2")
        seen.append((await b.compactions.save_compaction(summary, entry, tenant="t")).version)
        seen.append((await b.compactions.log_compaction(entry, tenant="t")).version)
        seen.append((await b.working.put_working("c", "k", "v", tenant="t", ttl=5)).version)
        pin = await b.pins.pin("c", "p", tenant="t")
        seen.append(pin.version)
        seen.append((await b.pins.unpin("c", pin.value.id, tenant="t")).version)
        assert seen == list(range(1, 10))
        info = await log.get_conversation("c", tenant="t")
        assert info is not None
        assert info.version == 9 == await log.version("c", tenant="t")
        # writing nothing moves nothing
        assert (await b.pins.unpin("c", pin.value.id, tenant="t")).value is False
        assert (await log.ensure_conversation("c", tenant="t", user="u")).version == 9
        assert await log.version("c", tenant="t") == 9
        assert await log.version("c", tenant="other") == 0

    # -- summaries and compactions ------------------------------------------------------------

    @scenario
    async def test_a_summary_saved_against_a_stale_version_conflicts(
        self, b: Backend, clock: ManualClock
    ) -> None:
        await b.conversations.append(
            "c", [Message.user(f"m{i}") for i in range(6)], tenant="t", user="u"
        )
        log = b.summaries
        first = await log.save_summary(Summary("c", 0, 1, 2, "one"), tenant="t", expected=0)
        assert first.value.version == 1
        v = await b.conversations.version("c", tenant="t")
        with raises(SummaryConflictError) as lost:
            await log.save_summary(Summary("c", 0, 1, 4, "rival"), tenant="t", expected=0)
        assert lost[0].latest.version == 1
        with raises(SummaryConflictError):  # covers nothing the stored one does not
            await log.save_summary(Summary("c", 0, 1, 2, "same"), tenant="t")
        with raises(InvalidMessageError, "upto_seq"):
            await log.save_summary(Summary("c", 0, 1, 99, "beyond"), tenant="t")
        assert await b.conversations.version("c", tenant="t") == v
        second = await log.save_summary(Summary("c", 0, 3, 4, "two"), tenant="t", expected=1)
        assert second.value.version == 2
        latest = await log.latest_summary("c", tenant="t")
        assert latest is not None
        assert (latest.version, latest.content) == (2, "two")
        assert [s.content for s in await log.summaries("c", tenant="t")] == ["one", "two"]
        assert await log.latest_summary("c", tenant="other") is None

    @scenario
    async def test_a_compaction_writes_its_summary_and_entry_together(
        self, b: Backend, clock: ManualClock
    ) -> None:
        await b.conversations.append(
            "c", [Message.user(f"m{i}") for i in range(4)], tenant="t", user="u"
        )
        log = b.compactions
        v = await b.conversations.version("c", tenant="t")
        bad = CompactionEntry(0, "c", clock(), "hard", True, 10, 5, upto_seq=9)
        with raises(InvalidMessageError, "upto_seq"):
            await log.save_compaction(Summary("c", 0, 1, 3, "s"), bad, tenant="t")
        assert await b.summaries.summaries("c", tenant="t") == []
        assert await log.compactions("c", tenant="t") == []
        assert await b.conversations.version("c", tenant="t") == v
        entry = CompactionEntry(0, "c", clock(), "hard", True, 10, 5, upto_seq=3, strategies=("x",))
        done = await log.save_compaction(Summary("c", 0, 1, 3, "s"), entry, tenant="t")
        saved, logged = done.value
        assert (saved.version, logged.summary_version, logged.id > 0) == (1, 1, True)
        plain = await log.log_compaction(
            CompactionEntry(0, "c", clock(), "soft", False, 5, 5, upto_seq=4), tenant="t"
        )
        assert [e.id for e in await log.compactions("c", tenant="t")] == [logged.id, plain.value.id]
        assert (await log.compactions("c", tenant="t"))[0].strategies == ("x",)
        with raises(InvalidMessageError, "summary_version"):
            await log.log_compaction(
                CompactionEntry(0, "c", clock(), "soft", True, 1, 1, summary_version=7), tenant="t"
            )
        assert await log.compactions("c", tenant="other") == []

    # -- working memory and pins ------------------------------------------------------------------

    @scenario
    async def test_working_memory_expires_after_its_ttl(
        self, b: Backend, clock: ManualClock
    ) -> None:
        call = Message.assistant("", tool_calls=[ToolCallPart("k1", "fetch")])
        await b.conversations.append(
            "c", [call, Message.tool("k1", "the full result")], tenant="t", user="u",
            readback=[(1, "k1", "result-1", 30.0)],
        )  # fmt: skip
        work = b.working
        await work.put_working("c", "short", "brief", tenant="t", ttl=10, meta={"a": 1})
        await work.put_working("c", "forever", "kept", tenant="t", ttl=math.inf)
        item = await work.get_working("c", "short", tenant="t")
        assert item is not None
        assert (item.content, dict(item.meta), item.expires_at) == ("brief", {"a": 1}, clock() + 10)
        ref = await work.get_working("c", "result-1", tenant="t")
        assert ref is not None
        assert ref.content == "the full result"
        assert await work.get_working("c", "short", tenant="other") is None
        clock.advance(11)
        assert await work.get_working("c", "short", tenant="t") is None
        assert await work.get_working("c", "result-1", tenant="t") is not None
        v = await b.conversations.version("c", tenant="t")
        assert await work.collect_working() == 1
        assert await b.conversations.version("c", tenant="t") == v + 1
        clock.advance(20)
        assert await work.get_working("c", "result-1", tenant="t") is None
        assert await work.collect_working() == 1
        kept = await work.get_working("c", "forever", tenant="t")
        assert kept is not None
        assert kept.content == "kept"

    @scenario
    async def test_pins_keep_priority_then_pin_order(self, b: Backend, clock: ManualClock) -> None:
        await b.conversations.ensure_conversation("c", tenant="t", user="u")
        await b.conversations.ensure_conversation("c", tenant="other", user="u")
        pins = b.pins
        late = await pins.pin("c", "late", tenant="t", priority=2)
        await pins.pin("c", "first", tenant="t", priority=0)
        await pins.pin("c", "second", tenant="t", priority=0)
        assert [p.content for p in await pins.pinned("c", tenant="t")] == [
            "first",
            "second",
            "late",
        ]
        assert await pins.pinned("c", tenant="other") == []
        assert (await pins.unpin("c", late.value.id, tenant="other")).value is False
        assert (await pins.unpin("c", late.value.id, tenant="t")).value is True
        assert [p.content for p in await pins.pinned("c", tenant="t")] == ["first", "second"]

    # -- search ------------------------------------------------------------------------------------

    @scenario
    async def test_search_stays_in_its_tenant_and_conversation(
        self, b: Backend, clock: ManualClock
    ) -> None:
        log = b.conversations
        await log.append(
            "c", [Message.user("the quarterly budget review"), Message.assistant("budget noted"),
                  Message.user("我今年35岁，在上海工作"), Message.user("weather is fine")],
            tenant="t", user="u",
        )  # fmt: skip
        await log.append("c", [Message.user("secret budget of tenant o")], tenant="o", user="u")
        await log.append("d", [Message.user("budget elsewhere")], tenant="t", user="u")
        find = b.search
        hits = await find.search("c", "budget", tenant="t")
        assert sorted(h.message.seq or 0 for h in hits) == [1, 2]
        assert all("tenant o" not in h.message.text for h in hits)
        assert [h.message.text for h in await find.search("c", "budget", tenant="o")] == [
            "secret budget of tenant o"
        ]
        assert [h.message.seq for h in await find.search("c", "上海", tenant="t")] == [3]
        assert [
            h.message.seq for h in await find.search("c", "budget", tenant="t", before_seq=2)
        ] == [1]
        assert [
            h.message.seq for h in await find.search("c", "budget", tenant="t", roles=["assistant"])
        ] == [2]
        assert len(await find.search("c", "budget", tenant="t", limit=1)) == 1
        seqs = await find.search_seqs("c", "budget", tenant="t")
        assert [s for s, _ in seqs] == [h.message.seq for h in hits]
        assert await find.search("c", "budget", tenant="nobody") == []
        assert await find.search("c", 'NEAR( "OR', tenant="t") == []  # text, never syntax

    # -- bad input ------------------------------------------------------------------------------------

    @scenario
    async def test_bad_input_raises_a_typed_error_and_writes_nothing(
        self, b: Backend, clock: ManualClock
    ) -> None:
        log = b.conversations
        await log.append("c", [Message.user("kept", id="kept")], tenant="t", user="u")
        v = await log.version("c", tenant="t")
        bad: list[tuple[Awaitable[Any], type[ContextwrightError], str]] = [
            (log.append("c", ["text"], tenant="t", user="u"), InvalidMessageError, "messages[0]"),  # type: ignore[list-item]
            (log.append("c", [Message.user("x")], tenant="t", user="u", tokens=[1, 2]), InvalidMessageError, "tokens"),
            (log.append("c", [Message.user("other", id="kept")], tenant="t", user="u"), InvalidMessageError, "messages[0].id"),
            (log.append("c", [Message.user("x")], tenant="", user="u"), ContextwrightError, "tenant"),
            (log.append("", [Message.user("x")], tenant="t", user="u"), ContextwrightError, "conversation"),
            (log.read("c", tenant="t", limit=-1), InvalidMessageError, "limit"),
            (log.set_message_tokens("c", tenant="t", counts={5: 1}, counter="n"), InvalidMessageError, "counts[5]"),
            (b.summaries.save_summary(Summary("c", 0, 2, 1, "x"), tenant="t"), InvalidMessageError, "upto_seq"),
            (b.summaries.save_summary(Summary("nope", 0, 1, 1, "x"), tenant="t"), InvalidMessageError, "conversation"),
            (b.working.put_working("c", "k", "v", tenant="t", ttl=0), ContextwrightError, "ttl"),
            (b.working.put_working("c", "k", 5, tenant="t", ttl=1), InvalidMessageError, "content"),  # type: ignore[arg-type]
            (b.pins.pin("c", "p", tenant="t", priority="high"), ContextwrightError, "priority"),  # type: ignore[arg-type]
            (b.search.search("c", "x", tenant="t", roles="user"), ContextwrightError, "roles"),
        ]  # fmt: skip
        for call, kind, where in bad:
            with raises(kind, where):
                await call
        assert await log.version("c", tenant="t") == v
        assert _texts(await log.read("c", tenant="t")) == ["kept"]
        assert await log.get_conversation("", tenant="t") is None
        assert await b.working.get_working("c", "k", tenant="t") is None
        assert await b.pins.pinned("c", tenant="t") == []

    @scenario
    async def test_a_closed_backend_refuses_calls(self, b: Backend, clock: ManualClock) -> None:
        await b.aclose()
        with raises(StoreError):
            await b.conversations.version("c", tenant="t")
        await b.aclose()  # idempotent

    # -- properties (hypothesis) ----------------------------------------------------------------

    if _HYPOTHESIS:

        @given(
            st.lists(
                st.tuples(
                    st.sampled_from(["t1", "t2"]), st.sampled_from(["a", "b"]),
                    st.sampled_from(["u", "v"]), st.integers(1, 3),
                ),
                max_size=12,
            )
        )  # fmt: skip
        @settings(max_examples=25, deadline=None, suppress_health_check=_EACH_BACKEND)
        def test_property_tenants_never_see_each_other(
            self, ops: list[tuple[str, str, str, int]]
        ) -> None:
            async def body(b: Backend, clock: ManualClock) -> None:
                owners: dict[tuple[str, str], str] = {}
                texts: dict[tuple[str, str], list[str]] = {}
                writes: dict[tuple[str, str], int] = {}
                for tenant, conv, user, n in ops:
                    key = (tenant, conv)
                    batch = [
                        f"{tenant}x{conv} said {len(texts.get(key, [])) + i}" for i in range(n)
                    ]
                    call = b.conversations.append(
                        conv, [Message.user(t) for t in batch], tenant=tenant, user=user
                    )
                    if owners.setdefault(key, user) != user:
                        with raises(InvalidMessageError, "user"):
                            await call
                        continue
                    await call
                    texts.setdefault(key, []).extend(batch)
                    writes[key] = writes.get(key, 0) + 1
                for tenant in ("t1", "t2"):
                    listed = await b.conversations.list_conversations(tenant=tenant)
                    assert sorted(i.id for i in listed) == sorted(
                        c for t, c in texts if t == tenant
                    )
                    for conv in ("a", "b"):
                        key = (tenant, conv)
                        stored = await b.conversations.read(conv, tenant=tenant)
                        assert _texts(stored) == texts.get(key, [])
                        assert [m.seq for m in stored] == list(range(1, len(stored) + 1))
                        assert await b.conversations.version(conv, tenant=tenant) == writes.get(
                            key, 0
                        )
                        for other in ("t1", "t2"):  # another tenant's words find nothing here
                            hits = await b.search.search(conv, f"{other}x{conv}", tenant=tenant)
                            assert (other == tenant and key in texts) or hits == []
                            assert all(h.message.text.startswith(f"{tenant}x") for h in hits)

            self.run(body)

        @given(
            st.lists(st.lists(st.integers(0, 9), max_size=5), max_size=8),
            st.lists(st.integers(0, 20), min_size=50, max_size=50),
        )
        @settings(max_examples=25, deadline=None, suppress_health_check=_EACH_BACKEND)
        def test_property_seqs_are_gapless_and_retries_are_free(
            self, batches: list[list[int]], counts: list[int]
        ) -> None:
            async def body(b: Backend, clock: ManualClock) -> None:
                order: list[int] = []  # message numbers in the order they were first stored
                version = 0
                for batch in batches:
                    msgs = [Message.user(f"number {k}", id=f"m{k}") for k in batch]
                    tokens = [counts[k] for k in batch]
                    fresh = [k for k in dict.fromkeys(batch) if k not in order]
                    done = await b.conversations.append(
                        "c", msgs, tenant="t", user="u", tokens=tokens, counter="n"
                    )
                    order += fresh
                    version += 1 if fresh or version == 0 else 0
                    assert done.version == version
                    assert [m.seq for m in done.value] == [order.index(k) + 1 for k in batch]
                stored = await b.conversations.read("c", tenant="t")
                assert [m.seq for m in stored] == list(range(1, len(order) + 1))
                assert [m.id for m in stored] == [f"m{k}" for k in order]
                total = await b.conversations.token_total("c", tenant="t")
                assert total == (len(order), sum(counts[k] for k in order))
                info = await b.conversations.get_conversation("c", tenant="t")
                assert (info is None) == (not batches)
                assert info is None or (info.last_seq, info.version) == (len(order), version)

            self.run(body)
