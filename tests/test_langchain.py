"""The LangChain integration end to end: create_agent's loop and create_react_agent's, the history.

The agents run their own loops with a fake model that calls a tool
(`lc_fakes.ToolCallingFake`); what the model RECEIVED is converted back and
counted with the engine's counter: it never exceeds the budget, never holds an
orphaned tool call or result, and the earliest fact of the run comes back through
recall when asked.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from contextwright import (
    ConfigError,
    ContextEngine,
    ContextReport,
    Conversations,
    InvalidMessageError,
    count_messages,
)
from contextwright.integrations.langchain import (
    RECEIPT_KEY,
    ContextwrightChatMessageHistory,
    ContextwrightHook,
    ContextwrightMiddleware,
    from_langchain_messages,
)
from contextwright.integrations.langchain._middleware import receipt_dict

from .lc_fakes import ToolCallingFake, check_received, lookup

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 2000
FACT = "My locker code is 4817, please remember it."
QUESTION = "What is my locker code?"


@pytest.fixture(scope="module")
def convs() -> Iterator[Conversations]:
    engine = ContextEngine(system_prompt="You are a helpful assistant.", budget=BUDGET)
    with Conversations(engine, None) as c:  # one store for the module; a thread each
        yield c


def turn_text(i: int) -> str:
    if i == 0:
        return FACT
    return (
        f"Please check the shipping status of parcel {i}." if i % 2 else f"Thanks, noted item {i}."
    )


def asked_back(received: list[list]) -> bool:  # type: ignore[type-arg]
    return any("4817" in m.text for m in received[-1])


def test_create_agent_200_turns_under_budget_with_recall(convs: Conversations) -> None:
    model = ToolCallingFake()
    receipts: list[ContextReport] = []
    mw = ContextwrightMiddleware(convs, on_receipt=receipts.append)
    agent = create_agent(model, [lookup], middleware=[mw])
    config = {"configurable": {"thread_id": "lc-200"}}
    for i in range(200):  # no checkpointer: the store is the agent's memory
        out = agent.invoke({"messages": [HumanMessage(turn_text(i))]}, config)
    assert len(model.received) == 300  # 100 turns with a tool call, 100 without
    out = agent.invoke({"messages": [HumanMessage(QUESTION)]}, config)
    largest = check_received(model.received, convs.engine.counter, BUDGET)
    assert largest > BUDGET * 0.8  # the budget was used, not avoided
    assert asked_back(model.received)  # the first turn's fact, recalled for the question
    assert not any("4817" in m.text for m in model.received[-2])  # ...and only then
    # the receipt: in the state, in last_receipt, given to on_receipt, for every call
    assert out[RECEIPT_KEY] == mw.last_receipt.to_dict()  # type: ignore[union-attr]
    assert len(receipts) == 301
    assert all(receipt_dict(r) == r.to_dict() for r in receipts)  # the state's form is to_dict's
    assert out[RECEIPT_KEY]["budget"] <= BUDGET
    recalled = next(b for b in out[RECEIPT_KEY]["blocks"] if b["name"] == "recalled_turns")
    assert recalled["status"] == "included"
    stored = convs.messages_sync("lc-200")
    assert len(stored) == 200 + 100 * 3 + 100 + 2  # user turns, calls/results/answers, notes, Q&A
    assert [m.role for m in stored[:3]] == ["user", "assistant", "user"]
    assert len({m.id for m in stored}) == len(stored)


def test_create_agent_async_with_checkpointer_stores_each_message_once(
    convs: Conversations,
) -> None:
    model = ToolCallingFake()
    saver = InMemorySaver()
    config = {"configurable": {"thread_id": "lc-ckpt"}}

    async def run(turns: range, mw: ContextwrightMiddleware) -> dict:  # type: ignore[type-arg]
        agent = create_agent(
            model, [lookup], middleware=[mw], checkpointer=saver, system_prompt="Be brief."
        )
        out: dict = {}  # type: ignore[type-arg]
        for i in turns:
            out = await agent.ainvoke({"messages": [HumanMessage(turn_text(i))]}, config)
        return out

    asyncio.run(run(range(30), ContextwrightMiddleware(convs)))
    # a new middleware (a restarted process) over the checkpointed thread: nothing stored twice
    out = asyncio.run(run(range(30, 40), ContextwrightMiddleware(convs)))
    state_ids = [m.id for m in out["messages"]]
    stored = convs.messages_sync("lc-ckpt")
    assert [m.id for m in stored] == state_ids
    assert from_langchain_messages(out["messages"])[-1].text == stored[-1].text
    # the agent's system prompt leads what the model got, and is counted in the budget
    for got in model.received:
        assert isinstance(got[0], SystemMessage)
        assert got[0].text.startswith("Be brief.\n\nYou are a helpful assistant.")
    check_received(model.received, convs.engine.counter, BUDGET)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_create_react_agent_hooks(convs: Conversations) -> None:
    from langgraph.prebuilt import create_react_agent

    model = ToolCallingFake()
    hook = ContextwrightHook(convs, "react-1", tools=[lookup], budget=1500)
    agent = create_react_agent(
        model, [lookup], pre_model_hook=hook.pre_model_hook, post_model_hook=hook.post_model_hook,
        checkpointer=InMemorySaver(),
    )  # fmt: skip
    config = {"configurable": {"thread_id": "ignored: conversation_id wins"}}
    for i in range(60):
        out = agent.invoke({"messages": [HumanMessage(turn_text(i))]}, config)
    out = agent.invoke({"messages": [HumanMessage(QUESTION)]}, config)
    check_received(model.received, convs.engine.counter, 1500)
    assert asked_back(model.received)
    assert hook.last_receipt is not None
    assert hook.last_receipt.budget <= 1500
    # the hook leaves the state whole; the store holds the same messages
    assert [m.id for m in convs.messages_sync("react-1")] == [m.id for m in out["messages"]]


def test_a_retried_call_gets_the_same_context_and_stores_nothing(convs: Conversations) -> None:
    mw = ContextwrightMiddleware(convs, "retry-1")
    bridge = mw.bridge
    msgs = [HumanMessage("Please check parcel 7.", id="h1")]
    first = convs.run_sync(bridge.prepare("retry-1", msgs))
    again = convs.run_sync(bridge.prepare("retry-1", msgs))
    assert again is first
    call = AIMessage("", tool_calls=[{"name": "lookup", "args": {}, "id": "c1"}], id="a1")
    convs.run_sync(bridge.record("retry-1", [call]))
    result = ToolMessage("found", tool_call_id="c1", id="t1")
    step = convs.run_sync(bridge.prepare("retry-1", [*msgs, call, result]))
    ids = [m.id for m in step.messages]
    assert ids.index("h1") < ids.index("a1") < ids.index("t1")  # the call and its result, whole
    assert [m.id for m in convs.messages_sync("retry-1")] == ["h1", "a1", "t1"]
    # input that ends with the model's own answer is not a model call
    with pytest.raises(InvalidMessageError):
        convs.run_sync(bridge.prepare("retry-1", [*msgs, call, result, AIMessage("ok", id="a2")]))


def test_conversation_id_and_budget_are_checked(convs: Conversations) -> None:
    agent = create_agent(ToolCallingFake(), [lookup], middleware=[ContextwrightMiddleware(convs)])
    with pytest.raises(ConfigError, match="thread_id"):
        agent.invoke({"messages": [HumanMessage("hi")]})
    by_user = ContextwrightMiddleware(convs, lambda cfg: f"user-{cfg['configurable']['user']}")
    agent = create_agent(ToolCallingFake(), [lookup], middleware=[by_user])
    agent.invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"user": "ana"}})
    assert len(convs.messages_sync("user-ana")) == 2
    with pytest.raises(ConfigError):
        ContextwrightMiddleware(convs, budget="lots")  # type: ignore[arg-type]
    huge = "word " * 3000
    agent = create_agent(
        ToolCallingFake(), [lookup], middleware=[ContextwrightMiddleware(convs, "sys")],
        system_prompt=huge,
    )  # fmt: skip
    with pytest.raises(Exception, match="protected zone") as err:
        agent.invoke({"messages": [HumanMessage("hi")]})
    assert type(err.value).__name__ == "BudgetError"
    assert convs.messages_sync("sys") == []  # a refused build stores nothing


def test_history_round_trip_ownership_and_clear(convs: Conversations) -> None:
    history = ContextwrightChatMessageHistory(convs, "hist-1", user="ana")
    sent = [
        HumanMessage("Hi, I'm Ana.", id="u1", name="ana"),
        AIMessage("", tool_calls=[{"name": "lookup", "args": {"q": "Ana"}, "id": "c1"}], id="a1"),
        ToolMessage("nothing found", tool_call_id="c1", name="lookup", status="error", id="t1"),
        AIMessage("Hello Ana!", id="a2", response_metadata={"model_name": "fake"}),
    ]
    history.add_messages(sent)
    history.add_messages(sent[:2])  # stored already: not again
    got = history.messages
    assert [(type(m), m.id, m.content) for m in got] == [(type(m), m.id, m.content) for m in sent]
    assert got[2].status == "error"  # type: ignore[attr-defined]
    assert got[3].response_metadata["model_name"] == "fake"

    async def async_side() -> list:  # type: ignore[type-arg]
        await history.aadd_messages([HumanMessage("Bye.", id="u2")])
        return await history.aget_messages()

    assert [m.id for m in asyncio.run(async_side())] == ["u1", "a1", "t1", "a2", "u2"]
    with pytest.raises(InvalidMessageError) as err:
        ContextwrightChatMessageHistory(convs, "hist-1", user="bob").messages  # noqa: B018
    assert err.value.where == "user"
    history.clear()
    assert history.messages == []
    history.add_message(HumanMessage("Fresh start.", id="u3"))
    assert [m.id for m in history.messages] == ["u3"]
    asyncio.run(history.aclear())
    assert asyncio.run(history.aget_messages()) == []
    if hasattr(Conversations, "delete"):  # a real delete: the stored originals are gone
        assert convs.messages_sync("hist-1", user="ana") == []


def test_budget_counts_what_the_model_receives(convs: Conversations) -> None:
    model = ToolCallingFake()
    mw = ContextwrightMiddleware(convs, "count-1", budget=800, late_system="system")
    agent = create_agent(model, [lookup], middleware=[mw], system_prompt="Answer in English.")
    for i in range(12):
        agent.invoke({"messages": [HumanMessage(turn_text(i) + " " + "detail " * 30)]})
    tools_cost = mw.bridge._tools_cost([lookup])
    assert tools_cost > 0
    check_received(model.received, convs.engine.counter, 800 - tools_cost)
    # late_system="system": the goal restatement stays a system message, at the end
    assert isinstance(model.received[-1][-1], SystemMessage)
    n = count_messages(convs.engine.counter, from_langchain_messages(model.received[-1]))
    assert n <= 800 - tools_cost


def test_example_runs() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "langchain_agent.py")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "4817" in out.stdout
    assert "context receipt" in out.stdout


def test_bench_runs_tiny() -> None:
    """bench/bench_langchain.py end to end at a tiny size (the shape of its output, not numbers)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "bench")])}
    env["COLUMNS"] = "250"
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_langchain.py"), "--quick", "--sizes", "300",
         "--budgets", "2000"],
        capture_output=True, text=True, timeout=240, env=env, cwd=ROOT / "bench", check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Per turn, ms" in out.stdout
    assert "Goals (ratio = LangChain / contextwright" in out.stdout
    if (ROOT.parent / "shared" / "data" / "locomo").is_dir():
        assert "LoCoMo recall higher at 2,000" in out.stdout
