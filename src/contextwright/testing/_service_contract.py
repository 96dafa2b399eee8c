"""`ServiceContract`: what the stateful service asks of a backend beyond the basic roles.

`Conversations` stands on the store contract alone, whatever the backend; these
are the calls it makes that `StoreContract` does not pin down: recall's search
(`MessageSearch.search_outlines`: the hits and the outlines around them in one
call, under a match budget; `speaker_names`), housekeeping of the search index
(`optimize_index`), the backend's durable job queue (`Backend.jobs`, where
background summaries wait), and what the HTTP service adds: build receipts
(`Backend.receipts`: newest first, pruned to the newest ``keep``, never a write
of the conversation), API keys (`Backend.keys`) and deleting a conversation
with everything stored under it (`ConversationLog.delete_conversation`), none
of which ever reaches across tenants, and whose versions keep counting across a
delete (a conversation made again never repeats a version of the deleted one).
Subclass it as `StoreContract` (``open_backend``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    _HYPOTHESIS = True
except ImportError:  # pragma: no cover - the property test is left out
    _HYPOTHESIS = False

from .._errors import ConfigError, ContextwrightError, InvalidMessageError, StoreError
from ..model._messages import Message
from ..model._parts import ToolCallPart
from ..stores._contract import ApiKeys, Backend, Receipts
from ..stores._records import CompactionEntry, KeyRecord, Summary
from ._support import ManualClock, Suite, raises, scenario
from ._support import texts as _texts

__all__ = ["ServiceContract"]


def _thread() -> list[Message]:
    """Six messages: a tool result that says "budget" (never a hit), and two user turns that do."""
    call = ToolCallPart("call_1", "lookup", "{}")
    return [
        Message.user("alpha budget", name="Ann"),
        Message.assistant("checking", tool_calls=[call], name="Bob"),
        Message.tool("call_1", "budget numbers"),
        Message.user("budget again zebra", name="Cy"),
        Message.assistant("fine", name="Bob"),
        Message.user("last", name="Ann"),
    ]


class ServiceContract(Suite[Backend]):
    """The service's calls as test methods; subclass and define `open_backend` (module docstring)."""

    def open_backend(self, directory: Path, clock: Callable[[], float]) -> Backend:
        """A fresh, empty backend keeping its files (if any) under ``directory``."""
        raise NotImplementedError

    def open(self, directory: Path, clock: Callable[[], float]) -> Backend:
        return self.open_backend(directory, clock)

    async def close(self, subject: Backend) -> None:
        await subject.aclose()

    @scenario
    async def test_search_outlines_gives_hits_and_their_neighbours(
        self, b: Backend, clock: ManualClock
    ) -> None:
        await b.conversations.append("c", _thread(), tenant="t", user="u")
        find = b.search.search_outlines
        hits, outlines = await find("c", "budget", tenant="t", around=1)
        assert sorted(seq for seq, _ in hits) == [1, 4]  # not the tool result
        assert all(score > 0 for _, score in hits)
        assert [o.seq for o in outlines] == [1, 2, 3, 4, 5]  # the tool result as a neighbour
        assert [o.role for o in outlines] == ["user", "assistant", "tool", "user", "assistant"]
        assert outlines[0].text == "alpha budget"
        assert outlines[0].name == "Ann"
        hits, outlines = await find("c", "budget", tenant="t", before_seq=4, around=1)
        assert [seq for seq, _ in hits] == [1]
        assert [o.seq for o in outlines] == [1, 2]
        _, outlines = await find("c", "budget", tenant="t", around=1, known={2, 3})
        assert {o.seq for o in outlines} <= {1, 4, 5}
        assert {1, 4} <= {o.seq for o in outlines}
        assert len((await find("c", "budget", tenant="t", limit=1))[0]) == 1
        assert [o.seq for o in (await find("c", "budget", tenant="t"))[1]] == [1, 4]  # around=0
        assert await find("c", "budget", tenant="other") == ([], [])
        assert await find("nope", "budget", tenant="t") == ([], [])
        assert await find("c", 'NEAR( "OR', tenant="t") == ([], [])  # text, never syntax
        bad_input = (({"around": -1}, "around"), ({"match_budget": -1}, "match_budget"),
                     ({"known": 3}, "known"))  # fmt: skip
        for bad, field in bad_input:
            with raises(ContextwrightError, field):
                await find("c", "budget", tenant="t", **bad)  # type: ignore[arg-type]

    @scenario
    async def test_a_match_budget_keeps_the_rarest_terms(
        self, b: Backend, clock: ManualClock
    ) -> None:
        await b.conversations.append("c", _thread(), tenant="t", user="u")
        find = b.search.search_outlines
        every, _ = await find("c", "budget zebra", tenant="t")
        assert sorted(seq for seq, _ in every) == [1, 4]
        rare, _ = await find("c", "budget zebra", tenant="t", match_budget=1)
        assert [seq for seq, _ in rare] == [4]  # "zebra" (one message) fits, "budget" (two) not
        assert await find("c", "budget zebra", tenant="t", match_budget=0) == ([], [])

    @scenario
    async def test_speaker_names_are_distinct_and_sorted(
        self, b: Backend, clock: ManualClock
    ) -> None:
        await b.conversations.append("c", _thread(), tenant="t", user="u")
        names = b.search.speaker_names
        assert await names("c", tenant="t") == ["Ann", "Bob", "Cy"]
        assert await names("c", tenant="t", after_seq=2) == ["Ann", "Bob", "Cy"]
        assert await names("c", tenant="t", after_seq=4) == ["Ann", "Bob"]
        assert await names("c", tenant="t", upto_seq=2) == ["Ann", "Bob"]
        assert await names("c", tenant="other") == []

    @scenario
    async def test_optimising_the_index_changes_no_answer(
        self, b: Backend, clock: ManualClock
    ) -> None:
        await b.conversations.append("c", _thread(), tenant="t", user="u")
        before = await b.search.search_outlines("c", "budget", tenant="t", around=1)
        version = await b.conversations.version("c", tenant="t")
        await b.search.optimize_index()
        assert await b.search.search_outlines("c", "budget", tenant="t", around=1) == before
        assert await b.conversations.version("c", tenant="t") == version  # not a write of it
        await b.conversations.append("c", [Message.user("budget late")], tenant="t", user="u")
        await b.search.optimize_index()
        hits, _ = await b.search.search_outlines("c", "budget", tenant="t")
        assert sorted(seq for seq, _ in hits) == [1, 4, 7]
        await b.aclose()
        with raises(StoreError):
            await b.search.optimize_index()

    @scenario
    async def test_the_backend_has_a_job_queue(self, b: Backend, clock: ManualClock) -> None:
        assert b.jobs is not None
        job = await b.jobs.enqueue("summarise", "c", {"n": 1}, tenant="t")
        again = await b.jobs.enqueue("summarise", "c", {"n": 2}, tenant="t")
        assert again.id == job.id  # one pending job per (tenant, kind, key)
        assert [j.id for j in await b.jobs.jobs(tenant="t")] == [job.id]
        claimed = await b.jobs.claim(["summarise"], worker="w", lease=30.0)
        assert claimed is not None
        assert claimed.payload == {"n": 1}
        await b.jobs.complete(claimed)
        assert await b.jobs.jobs(tenant="t") == []

    # -- receipts ----------------------------------------------------------------------------

    @scenario
    async def test_receipts_come_newest_first_and_keep_the_newest(
        self, b: Backend, clock: ManualClock
    ) -> None:
        r = _receipts(b)
        report = {"blocks": [{"source": "recent", "tokens": 12}], "total": 12, "名": "上海"}
        first = await r.record_receipt("c", report, tenant="t")
        assert (first.conversation, first.tenant, first.at) == ("c", "t", clock())
        assert first.receipt == report
        for n in range(1, 6):
            clock.advance(1)
            await r.record_receipt("c", {"n": n}, tenant="t", keep=3)
        got = await r.receipts("c", tenant="t")
        assert [x.receipt for x in got] == [{"n": 5}, {"n": 4}, {"n": 3}]  # pruned to 3
        assert [x.at for x in got] == [clock(), clock() - 1, clock() - 2]
        assert got[0].id > got[1].id > got[2].id > first.id
        assert [x.receipt for x in await r.receipts("c", tenant="t", limit=2)] == [
            {"n": 5}, {"n": 4}
        ]  # fmt: skip
        assert await r.receipts("c", tenant="t", limit=0) == []
        other = await r.record_receipt("d", {"n": 0}, tenant="t", at=5.0)
        assert (other.at, other.id > got[0].id) == (5.0, True)  # ids grow across conversations
        assert await r.receipts("nothing", tenant="t") == []
        # a receipt is diagnostics: no conversation is made, no version moves
        assert await b.conversations.version("c", tenant="t") == 0
        assert await b.conversations.get_conversation("c", tenant="t") is None
        await b.conversations.append("e", [Message.user("hi")], tenant="t", user="u")
        v = await b.conversations.version("e", tenant="t")
        await r.record_receipt("e", {"n": 1}, tenant="t")
        assert await b.conversations.version("e", tenant="t") == v
        bad: list[tuple[dict[str, Any], type[ContextwrightError], str]] = [
            ({"receipt": ["not", "a", "mapping"]}, InvalidMessageError, "receipt"),
            ({"receipt": {"x": object()}}, InvalidMessageError, "receipt"),
            ({"keep": 0}, InvalidMessageError, "keep"),
            ({"at": "noon"}, InvalidMessageError, "at"),
            ({"tenant": ""}, ContextwrightError, "tenant"),
            ({"conversation": ""}, ContextwrightError, "conversation"),
        ]
        for change, kind, where in bad:
            call: dict[str, Any] = {"conversation": "c", "receipt": {"n": 9}, "tenant": "t"}
            with raises(kind, where):
                await r.record_receipt(**{**call, **change})
        with raises(InvalidMessageError, "limit"):
            await r.receipts("c", tenant="t", limit=-1)
        assert [x.receipt["n"] for x in await r.receipts("c", tenant="t")] == [5, 4, 3]

    @scenario
    async def test_receipts_stay_in_their_tenant(self, b: Backend, clock: ManualClock) -> None:
        r = _receipts(b)
        for n in range(3):
            await r.record_receipt("c", {"tenant": "t", "n": n}, tenant="t")
            await r.record_receipt("c", {"tenant": "o", "n": n}, tenant="o")
        await r.record_receipt("c", {"tenant": "t", "n": 3}, tenant="t", keep=1)
        assert [x.receipt for x in await r.receipts("c", tenant="t")] == [{"tenant": "t", "n": 3}]
        others = await r.receipts("c", tenant="o")
        assert [x.receipt["n"] for x in others] == [2, 1, 0]  # pruning one tenant's kept these
        assert all(x.tenant == "o" and x.receipt["tenant"] == "o" for x in others)
        assert await r.receipts("c", tenant="nobody") == []

    # -- API keys --------------------------------------------------------------------------------

    @scenario
    async def test_api_keys_are_created_found_listed_and_revoked(
        self, b: Backend, clock: ManualClock
    ) -> None:
        k = _keys(b)
        one = KeyRecord("cw_one", "t", "ci", "ab" * 32, clock())
        await k.create_key(one)
        with raises(ConfigError, "cw_one"):  # one id, one key, whatever else differs
            await k.create_key(KeyRecord("cw_one", "o", "other", "cd" * 32, clock()))
        assert await k.find_key("cw_one") == one
        assert await k.find_key("cw_nope") is None
        clock.advance(1)
        two = KeyRecord("cw_two", "o", "bot", "cd" * 32, clock())
        await k.create_key(two)
        clock.advance(1)
        three = KeyRecord("cw_three", "t", "", "ef" * 32, clock())
        await k.create_key(three)
        assert await k.list_keys() == [one, two, three]  # oldest first
        assert await k.list_keys(tenant="t") == [one, three]
        assert await k.list_keys(tenant="nobody") == []
        clock.advance(1)
        assert await k.revoke_key("cw_one") is True
        revoked = await k.find_key("cw_one")
        assert revoked is not None
        assert (revoked.revoked_at, revoked.secret_hash) == (clock(), one.secret_hash)
        assert await k.revoke_key("cw_one") is False  # already revoked
        assert await k.revoke_key("cw_nope") is False
        assert await k.revoke_key("cw_three", at=123.0) is True
        assert [x.revoked_at for x in await k.list_keys(tenant="t")] == [clock(), 123.0]
        assert await k.find_key("cw_two") == two  # untouched
        bad = [
            (KeyRecord("", "t", "n", "ab" * 32, 1.0), "key_id"),
            (KeyRecord("cw_x", "", "n", "ab" * 32, 1.0), "tenant"),
            (KeyRecord("cw_x", "t", "n", "not hex", 1.0), "secret_hash"),
            (KeyRecord("cw_x", "t", "n", "ab" * 32, float("nan")), "created_at"),
            ("cw_x", "KeyRecord"),
        ]
        for record, where in bad:
            with raises(ConfigError, where):
                await k.create_key(record)  # type: ignore[arg-type]
        assert await k.find_key("cw_x") is None
        assert len(await k.list_keys()) == 3

    # -- deleting a conversation -----------------------------------------------------------------

    @scenario
    async def test_deleting_a_conversation_removes_everything_of_it(
        self, b: Backend, clock: ManualClock
    ) -> None:
        log = b.conversations
        for tenant in ("t", "o"):  # the same conversation id in two tenants
            await _fill(b, clock, "c", tenant)
        await _fill(b, clock, "d", "t")
        keep_o = await _everything(b, "c", "o")
        keep_d = await _everything(b, "d", "t")
        assert all(keep_o[k] for k in ("search", "summaries", "working", "pinned", "receipts"))
        assert await log.delete_conversation("c", tenant="t") is True
        assert await _everything(b, "c", "t") == _NOTHING
        assert await log.list_conversations(tenant="t") == [
            await log.get_conversation("d", tenant="t")
        ]
        assert await _everything(b, "c", "o") == keep_o  # another tenant's is untouched
        assert await _everything(b, "d", "t") == keep_d  # and another conversation
        assert await log.delete_conversation("c", tenant="t") is False
        assert await log.delete_conversation("nope", tenant="t") is False
        # the id is free again: anyone may start it, from seq 1, with nothing of the old one
        again = await log.append("c", [Message.user("fresh start")], tenant="t", user="v")
        assert ([m.seq for m in again.value], again.version > 0) == ([1], True)
        assert await b.search.search("c", "budget", tenant="t") == []
        assert [h.message.text for h in await b.search.search("c", "fresh", tenant="t")] == [
            "fresh start"
        ]
        assert await b.summaries.summaries("c", tenant="t") == []
        assert await b.pins.pinned("c", tenant="t") == []
        # receipts of a conversation never stored go too (there is nothing else to delete)
        r = _receipts(b)
        await r.record_receipt("ghost", {"n": 1}, tenant="t")
        assert await log.delete_conversation("ghost", tenant="t") is False
        assert await r.receipts("ghost", tenant="t") == []
        with raises(ContextwrightError, "conversation"):
            await log.delete_conversation("", tenant="t")
        with raises(ContextwrightError, "tenant"):
            await log.delete_conversation("c", tenant="")

    @scenario
    async def test_versions_keep_counting_across_a_delete(
        self, b: Backend, clock: ManualClock
    ) -> None:
        log = b.conversations
        for n in range(3):
            await log.append("c", [Message.user(f"first {n}")], tenant="t", user="u")
        await b.pins.pin("c", "pinned", tenant="t")
        v = await log.version("c", tenant="t")
        first = await log.get_conversation("c", tenant="t")
        assert first is not None
        assert (first.version, first.first_version) == (v, 1)
        assert await log.delete_conversation("c", tenant="t") is True
        assert await log.version("c", tenant="t") == 0  # the deleted state
        # made again (by anyone, by ensure or append): above the deleted one's versions,
        # and on until they pass it, no version value comes back
        made = await log.ensure_conversation("c", tenant="t", user="w")
        assert (made.version, made.first_version, made.last_seq) == (v + 1, v + 1, 0)
        seen = [v, made.version]
        while seen[-1] <= 2 * v:
            written = await log.append("c", [Message.user("again")], tenant="t", user="w")
            seen.append(written.version)
            assert await log.version("c", tenant="t") == written.version
        assert seen == sorted(set(seen)), seen
        assert seen[-1] > 2 * v
        info = await log.get_conversation("c", tenant="t")
        assert info is not None
        assert (info.version, info.first_version) == (seen[-1], v + 1)
        # deleted again, made again by an append: above the second one's last version
        assert await log.delete_conversation("c", tenant="t") is True
        third = await log.append("c", [Message.user("third")], tenant="t", user="u")
        assert ([m.seq for m in third.value], third.version) == ([1], seen[-1] + 1)
        info = await log.get_conversation("c", tenant="t")
        assert info is not None
        assert info.first_version == seen[-1] + 1
        # another tenant's id, and another id, count from 1 as ever
        other = await log.append("c", [Message.user("o")], tenant="o", user="u")
        assert other.version == 1
        d = await log.ensure_conversation("d", tenant="t", user="u")
        assert (d.version, d.first_version) == (1, 1)

    if _HYPOTHESIS:

        @given(
            st.lists(
                st.tuples(
                    st.sampled_from(["append", "append", "delete"]),
                    st.sampled_from(["t1", "t2"]), st.sampled_from(["a", "b"]),
                    st.sampled_from(["u", "v"]),
                ),
                max_size=10,
            )
        )  # fmt: skip
        @settings(
            max_examples=15, deadline=None, suppress_health_check=[HealthCheck.differing_executors]
        )
        def test_property_deletes_never_reach_another_tenant(
            self, ops: list[tuple[str, str, str, str]]
        ) -> None:
            async def body(b: Backend, clock: ManualClock) -> None:
                model: dict[tuple[str, str], tuple[str, list[str]]] = {}  # owner, texts
                last: dict[tuple[str, str], int] = {}  # the newest version of each id
                for n, (op, tenant, conv, user) in enumerate(ops):
                    key = (tenant, conv)
                    if op == "delete":
                        gone = await b.conversations.delete_conversation(conv, tenant=tenant)
                        assert gone == (model.pop(key, None) is not None)
                        continue
                    text = f"{tenant}x{conv} said {n}"
                    call = b.conversations.append(
                        conv, [Message.user(text)], tenant=tenant, user=user
                    )
                    owner, texts = model.setdefault(key, (user, []))
                    if owner != user:
                        with raises(InvalidMessageError, "user"):
                            await call
                        continue
                    written = await call
                    texts.append(text)
                    assert [m.seq for m in written.value] == [len(texts)]
                    # never a version of the id seen before, across deletes too
                    assert written.version > last.get(key, 0)
                    last[key] = written.version
                for tenant in ("t1", "t2"):
                    for conv in ("a", "b"):
                        owner, texts = model.get((tenant, conv), ("", []))
                        stored = await b.conversations.read(conv, tenant=tenant)
                        assert _texts(stored) == texts
                        assert (await b.conversations.version(conv, tenant=tenant) == 0) == (
                            (tenant, conv) not in model
                        )
                        hits = await b.search.search(conv, "said", tenant=tenant, limit=50)
                        assert sorted(h.message.text for h in hits) == sorted(texts)

            self.run(body)


_NOTHING: dict[str, Any] = {
    "info": None, "version": 0, "read": [], "outline": [], "totals": (0, 0), "count": 0,
    "search": [], "outlines": ([], []), "speakers": [], "summaries": [], "compactions": [],
    "working": [None, None], "pinned": [], "receipts": [],
}  # fmt: skip


def _receipts(b: Backend) -> Receipts:
    assert b.receipts is not None, "every built-in backend has receipts"
    return b.receipts


def _keys(b: Backend) -> ApiKeys:
    assert b.keys is not None, "every built-in backend has API keys"
    return b.keys


async def _fill(b: Backend, clock: ManualClock, conv: str, tenant: str) -> None:
    """A conversation with something in every table: messages (searched, so indexed),
    a summary and compaction entries, working memory (one read-back), a pin, receipts."""
    call = Message.assistant("", tool_calls=[ToolCallPart("k1", "fetch")], name="Bob")
    thread = [*_thread(), call, Message.tool("k1", "budget result")]
    await b.conversations.append(
        conv, thread, tenant=tenant, user="u", readback=[(7, "k1", "result-1", 60.0)]
    )
    assert await b.search.search(conv, "budget", tenant=tenant)
    entry = CompactionEntry(0, conv, clock(), "soft", True, 10, 5, upto_seq=3)
    await b.compactions.save_compaction(Summary(conv, 0, 1, 3, "s"), entry, tenant=tenant)
    await b.working.put_working(conv, "note", "v", tenant=tenant, ttl=60)
    await b.pins.pin(conv, f"pinned in {tenant}", tenant=tenant)
    await _receipts(b).record_receipt(conv, {"tenant": tenant}, tenant=tenant)


async def _everything(b: Backend, conv: str, tenant: str) -> dict[str, Any]:
    """What every read of the conversation answers (records that carry no time or id)."""
    log, find = b.conversations, b.search
    info = await log.get_conversation(conv, tenant=tenant)
    working = [await b.working.get_working(conv, k, tenant=tenant) for k in ("note", "result-1")]
    # (scores are left out: a backend may rank by statistics of its whole index)
    hits, outlines = await find.search_outlines(conv, "budget", tenant=tenant, around=1)
    return {
        "info": info, "version": await log.version(conv, tenant=tenant),
        "read": [m.to_dict() for m in await log.read(conv, tenant=tenant)],
        "outline": await log.read_outline(conv, tenant=tenant),
        "totals": await log.token_total(conv, tenant=tenant),
        "count": await log.count_messages(conv, tenant=tenant),
        "search": [h.message.seq for h in await find.search(conv, "budget", tenant=tenant)],
        "outlines": ([seq for seq, _ in hits], outlines),
        "speakers": await find.speaker_names(conv, tenant=tenant),
        "summaries": await b.summaries.summaries(conv, tenant=tenant),
        "compactions": await b.compactions.compactions(conv, tenant=tenant),
        "working": [None if w is None else w.content for w in working],
        "pinned": [p.content for p in await b.pins.pinned(conv, tenant=tenant)],
        "receipts": [x.receipt for x in await _receipts(b).receipts(conv, tenant=tenant)],
    }  # fmt: skip
