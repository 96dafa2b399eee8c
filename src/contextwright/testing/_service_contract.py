"""`ServiceContract`: what the stateful service asks of a backend beyond the basic roles.

`Conversations` stands on the store contract alone, whatever the backend; these
are the calls it makes that `StoreContract` does not pin down: recall's search
(`MessageSearch.search_outlines`: the hits and the outlines around them in one
call, under a match budget; `speaker_names`), housekeeping of the search index
(`optimize_index`), and the backend's durable job queue (`Backend.jobs`, where
background summaries wait). Subclass it as `StoreContract` (``open_backend``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .._errors import ContextwrightError, StoreError
from ..model._messages import Message
from ..model._parts import ToolCallPart
from ..stores._contract import Backend
from ._support import ManualClock, Suite, raises, scenario

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
