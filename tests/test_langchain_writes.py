"""What the LangChain middleware writes per model call, and the memory-QA configuration through it.

A user turn is one write: the new user message is built for, then stored with the
model's answer in one transaction (the conversation's version moves once). A call
that never records an answer stores nothing of its own; the question is stored as
history by the next call whose input holds it, and dropped if none does. A
`memory_qa_engine` over a `Backend` is a `Conversations` configuration the
middleware takes as it is: an int budget keeps its shares, and `Conversations`
adds no second recall.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from contextwright import Budget, ContextEngine, Conversations, TiktokenCounter, memory_qa_engine
from contextwright.history import RecallSource
from contextwright.history._recall import MEMORY_QA_SHARES
from contextwright.integrations.langchain import ContextwrightMiddleware
from contextwright.stores import SQLiteBackend

from .lc_fakes import ToolCallingFake, lookup
from .test_eval import SYNTHETIC, load_locomo_dict


@pytest.fixture
def convs() -> Iterator[Conversations]:
    engine = ContextEngine(system_prompt="You are a helpful assistant.", budget=2000)
    with Conversations(engine, None, inline_jobs=True) as c:
        yield c


def stored_ids(convs: Conversations, conversation: str) -> list[str]:
    return [m.id for m in convs.messages_sync(conversation)]


def version(convs: Conversations, conversation: str) -> int:
    assert convs.store is not None
    return convs.store.version(conversation, tenant="default")


def test_a_user_turn_is_one_write_of_the_question_and_the_answer(convs: Conversations) -> None:
    model = ToolCallingFake()
    agent = create_agent(model, [lookup], middleware=[ContextwrightMiddleware(convs, "one")])
    agent.invoke({"messages": [HumanMessage("Hello there.", id="q1")]})
    first = stored_ids(convs, "one")
    assert len(first) == 2  # the question, then the answer
    assert first[0] == "q1"
    before = version(convs, "one")
    out = agent.invoke({"messages": [HumanMessage("Thanks, noted.", id="q2")]})
    assert version(convs, "one") == before + 1  # one transaction for the whole turn
    assert stored_ids(convs, "one") == [*first, "q2", out["messages"][-1].id]
    seqs = [m.seq for m in convs.messages_sync("one")]
    assert seqs == list(range(1, len(seqs) + 1))
    # a tool call: the question with the call, then the result with the answer
    agent.invoke({"messages": [HumanMessage("Please check parcel 9.", id="q3")]})
    roles = [m.role for m in convs.messages_sync("one")][4:]
    assert roles == ["user", "assistant", "tool", "assistant"]


def test_a_call_without_an_answer_stores_nothing_of_its_own(convs: Conversations) -> None:
    bridge = ContextwrightMiddleware(convs, "pending").bridge
    q1 = HumanMessage("Where is parcel 4?", id="q1")
    convs.run_sync(bridge.prepare("pending", [q1]))
    assert stored_ids(convs, "pending") == []  # built for, not stored
    again = convs.run_sync(bridge.prepare("pending", [q1]))  # a retry: the same context
    assert again is convs.run_sync(bridge.prepare("pending", [q1]))
    # the model failed; the checkpointed state holds q1, the next call adds q2
    q2 = HumanMessage("Any news on parcel 4?", id="q2")
    step = convs.run_sync(bridge.prepare("pending", [q1, q2]))
    assert stored_ids(convs, "pending") == ["q1"]  # history now, stored before the build
    ids = [m.id for m in step.messages]
    assert ids.index("q1") < ids.index("q2")
    convs.run_sync(bridge.record("pending", [AIMessage("On its way.", id="a2")]))
    assert stored_ids(convs, "pending") == ["q1", "q2", "a2"]
    # without a checkpointer a failed call's question is not in the next input: dropped
    convs.run_sync(bridge.prepare("pending", [HumanMessage("Lost question?", id="q3")]))
    convs.run_sync(bridge.prepare("pending", [HumanMessage("New question.", id="q4")]))
    convs.run_sync(bridge.record("pending", [AIMessage("Answer.", id="a4")]))
    assert stored_ids(convs, "pending") == ["q1", "q2", "a2", "q4", "a4"]


def test_a_hook_without_its_post_hook_stores_the_question_with_the_next_step(
    convs: Conversations,
) -> None:
    bridge = ContextwrightMiddleware(convs, "nopost").bridge
    q = HumanMessage("Please check parcel 5.", id="q")
    convs.run_sync(bridge.prepare("nopost", [q]))
    call = AIMessage("", tool_calls=[{"name": "lookup", "args": {}, "id": "c1"}], id="a1")
    result = ToolMessage("found", tool_call_id="c1", id="t1")
    step = convs.run_sync(bridge.prepare("nopost", [q, call, result]))  # no record in between
    assert stored_ids(convs, "nopost") == ["q", "a1", "t1"]
    ids = [m.id for m in step.messages]
    assert ids.index("q") < ids.index("a1") < ids.index("t1")


def test_memory_qa_engine_over_a_backend_through_the_middleware() -> None:
    backend = SQLiteBackend(None).backend()
    counter = TiktokenCounter("cl100k_base")
    engine = memory_qa_engine(backend, counter=counter, budget=600)
    assert engine.budget == Budget(600, shares=MEMORY_QA_SHARES)  # an int gets the QA shares
    convs = Conversations(engine, backend)
    try:
        assert convs._extra == []  # the engine brings its recall: no second one
        assert sum(isinstance(s, RecallSource) for s in engine.sources) == 1
        convs.append_sync("c", load_locomo_dict(SYNTHETIC))
        mw = ContextwrightMiddleware(convs, "c", budget=500)
        assert mw.bridge.budget == Budget(500, shares=MEMORY_QA_SHARES)  # an int keeps them
        q = HumanMessage("Where are Bruno and Lena hiking?")
        got = convs.run_sync(mw.bridge.prepare("c", [q]))
        text = "\n".join(m.text for m in [got.system, *got.messages] if m is not None)
        assert "Cinque Terre" in text
        assert got.report.used <= 500
        names = [b.name for b in got.report.blocks]
        assert names.count("recalled_turns") == 1
    finally:
        convs.close()


def test_default_conversations_keep_their_recall_and_an_int_budget_its_default_shares(
    convs: Conversations,
) -> None:
    assert [type(s) for s in convs._extra] == [RecallSource]
    mw = ContextwrightMiddleware(convs, "x", budget=900)
    assert mw.bridge.budget == Budget(900)


def test_a_question_awaiting_its_answer_outlives_other_conversations(convs: Conversations) -> None:
    mw = ContextwrightMiddleware(convs, "w-0")
    bridge = mw.bridge
    bridge._max = 2  # remember two conversations
    convs.run_sync(bridge.prepare("w-0", [HumanMessage("First question?", id="q0")]))
    for i in range(1, 6):  # others come and go meanwhile
        convs.run_sync(bridge.prepare(f"w-{i}", [HumanMessage(f"Q{i}?", id=f"q{i}")]))
        convs.run_sync(bridge.record(f"w-{i}", [AIMessage(f"A{i}.", id=f"a{i}")]))
    assert len(bridge._records) <= 2 + 1
    convs.run_sync(bridge.record("w-0", [AIMessage("First answer.", id="a0")]))
    assert stored_ids(convs, "w-0") == ["q0", "a0"]
    assert stored_ids(convs, "w-5") == ["q5", "a5"]
