"""The active task: goals from user messages, steps and findings from the agent's work,
a bounded status summary in English and Chinese, and the source that renders it."""

from __future__ import annotations

import threading

import pytest

from contextwright import ConfigError, ContextEngine, HeuristicCounter, Message, ToolCallPart
from contextwright.history._task import ActiveTask, ActiveTaskSource, ActiveTaskTracker
from contextwright.sources import Turn


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def tracker(**kw: object) -> ActiveTaskTracker:
    return ActiveTaskTracker(clock=Clock(), **kw)  # type: ignore[arg-type]


def feed(t: ActiveTaskTracker, *messages: Message, conv: str = "c") -> ActiveTask | None:
    task = None
    for m in messages:
        task = t.observe("t", conv, m)
    return task


def call(id_: str, name: str, args: str = "{}", text: str = "") -> Message:
    return Message.assistant(text, tool_calls=[ToolCallPart(id_, name, args)])


# -- goals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["How do I deploy a FastAPI app on Fly.io?", "帮我查一下香港高才通的申请条件"]
)
def test_a_user_request_is_the_goal(text: str) -> None:
    task = feed(tracker(), Message.user(text))
    assert task is not None
    assert task.goal == text
    assert task.status == "active"


@pytest.mark.parametrize(
    "ack",
    [
        "ok",
        "OK!",
        "thanks",
        "Thank you so much!",
        "got it, thanks",
        "好的",
        "谢谢",
        "好的，谢谢！",
        "嗯嗯",
        "👍",
    ],
)
def test_acknowledgements_do_not_replace_the_goal(ack: str) -> None:
    t = tracker()
    feed(t, Message.user("Find flights from Berlin to Tokyo"), call("c1", "flights"))
    task = feed(t, Message.user(ack))
    assert task is not None
    assert task.goal == "Find flights from Berlin to Tokyo"
    assert len(task.steps) == 1  # the task goes on


def test_a_new_request_replaces_the_goal_and_starts_afresh() -> None:
    t = tracker()
    feed(t, Message.user("Find flights to Tokyo"), call("c1", "flights"), Message.tool("c1", "[]"))
    t.mark_done("t", "c")
    task = feed(t, Message.user("Now book a hotel in Kyoto"))
    assert task is not None
    assert (task.goal, task.status, task.steps, task.findings) == (
        "Now book a hotel in Kyoto",
        "active",
        (),
        (),
    )


@pytest.mark.parametrize(
    ("follow", "added"),
    [
        ("and also compare the prices", "compare the prices"),
        ("Also, check the baggage rules", "check the baggage rules"),
        ("另外，帮我看看行李规定", "帮我看看行李规定"),
        ("还有酒店也要查一下", "酒店也要查一下"),
    ],
)
def test_a_follow_up_is_appended_to_the_goal(follow: str, added: str) -> None:
    task = feed(tracker(), Message.user("Find flights to Tokyo"), Message.user(follow))
    assert task is not None
    assert task.goal == f"Find flights to Tokyo; {added}"


def test_the_goal_is_bounded_and_keeps_the_newest_addition() -> None:
    t = tracker(goal_chars=60)
    feed(t, Message.user("Plan a two-week trip through Japan " + "with many stops " * 10))
    task = feed(t, Message.user("and also book the ryokan"))
    assert task is not None
    assert len(task.goal) <= 60
    assert task.goal.startswith("Plan a two-week trip")
    assert task.goal.endswith("…; book the ryokan")


def test_a_message_is_observed_once() -> None:
    t = tracker()
    first = Message.user("Find flights to Tokyo")
    feed(t, first, Message.user("Book a hotel"), first)
    task = t.get("t", "c")
    assert task is not None
    assert task.goal == "Book a hotel"


# -- steps and findings ---------------------------------------------------------------------


def test_tool_calls_and_results_are_steps() -> None:
    t = tracker()
    task = feed(
        t,
        Message.user("Which Rust web framework should I use?"),
        Message.assistant(
            "Let me search.",
            tool_calls=[
                ToolCallPart("c1", "search", '{"q": "rust web framework", "limit": 5}'),
                ToolCallPart("c2", "fetch", '{"url": "https://example.com"}'),
            ],
        ),
        Message.tool(
            "c1", '{"results": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]}', tool_name="search"
        ),
        Message.tool("c2", "Error: connection refused", is_error=True),
        call("c3", "bench"),
    )
    assert task is not None
    assert [s.text for s in task.steps] == [
        "called search(q='rust web framework', limit=5) → returned 12 items",
        "called fetch(url='https://example.com') → error: connection refused",
        "called bench()",
    ]
    assert [s.done for s in task.steps] == [True, True, False]
    assert task.findings == ()  # "Let me search." is not a finding


def test_a_result_without_its_call_stands_alone() -> None:
    task = feed(
        tracker(),
        Message.user("go"),
        Message.tool("zz", "line one\nline two\nline three", tool_name="grep"),
    )
    assert task is not None
    assert task.steps[0].text == "grep returned 3 lines: line one"


def test_findings_are_sentences_that_state_results() -> None:
    t = tracker()
    task = feed(
        t,
        Message.user("Which framework?"),
        Message.assistant(
            "Let me check. I found 3 frameworks: axum, actix-web and hyper. "
            "Axum is the most popular choice with tokio. Do you want benchmarks?"
        ),
        Message.assistant("我查到了，共有5个版本。你还需要别的吗？"),
    )
    assert task is not None
    assert task.findings == (
        "I found 3 frameworks: axum, actix-web and hyper.",
        "Axum is the most popular choice with tokio.",
        "我查到了，共有5个版本。",
    )


def test_steps_and_findings_keep_the_newest() -> None:
    t = tracker(max_steps=3, max_findings=2)
    feed(t, Message.user("Run the checks"))
    for i in range(6):
        feed(t, call(f"c{i}", f"check{i}"), Message.tool(f"c{i}", "ok"))
        feed(t, Message.assistant(f"Check {i} passed with {i} warnings."))
    task = t.get("t", "c")
    assert task is not None
    assert [s.text.split("(")[0] for s in task.steps] == [
        "called check3",
        "called check4",
        "called check5",
    ]
    assert task.dropped_steps == 3
    assert task.findings == ("Check 4 passed with 4 warnings.", "Check 5 passed with 5 warnings.")
    assert task.dropped_findings == 4


# -- the status summary ----------------------------------------------------------------------

CONVERSATION = [
    Message.user("Find me a Rust HTTP framework for async servers"),
    Message.assistant(
        "Let me search.", tool_calls=[ToolCallPart("c1", "search", '{"q": "rust async http"}')]
    ),
    Message.tool(
        "c1", '[{"name": "axum"}, {"name": "actix"}, {"name": "hyper"}]', tool_name="search"
    ),
    Message.assistant("I found 3 frameworks: axum, actix-web and hyper."),
]


def test_status_summary_in_english_and_chinese() -> None:
    t = tracker()
    feed(t, *CONVERSATION)
    assert t.status_summary("t", "c") == (
        "Task status: ACTIVE\n"
        "Goal: Find me a Rust HTTP framework for async servers\n"
        "Completed steps:\n"
        "- called search(q='rust async http') → returned 3 items\n"
        "Findings:\n"
        "- I found 3 frameworks: axum, actix-web and hyper."
    )
    t.mark_done("t", "c")
    zh = t.status_summary("t", "c", locale="zh")
    assert zh.splitlines()[:4] == [
        "任务状态：已完成", "目标：Find me a Rust HTTP framework for async servers", "已完成步骤：",
        "- called search(q='rust async http') → returned 3 items",
    ]  # fmt: skip
    assert "发现：" in zh
    feed(t, Message.user("我想了解香港高才通的申请条件"))
    assert (
        t.status_summary("t", "c", locale="auto")
        == "任务状态：进行中\n目标：我想了解香港高才通的申请条件"
    )


def test_status_summary_is_bounded() -> None:
    t = tracker(summary_chars=300, max_steps=50, max_findings=50)
    feed(t, Message.user("Audit every service " + "carefully " * 30))
    for i in range(40):
        feed(
            t,
            call(f"c{i}", "audit", f'{{"service": "svc-{i}"}}'),
            Message.tool(f"c{i}", f"{i} issues found"),
        )
        feed(t, Message.assistant(f"Service {i} has {i} open issues."))
    text = t.status_summary("t", "c")
    assert len(text) <= 300
    assert text.startswith("Task status: ACTIVE\nGoal: Audit every service")
    assert "earlier steps" in text
    assert "svc-39" in text


def test_no_task_no_summary() -> None:
    t = tracker()
    assert t.status_summary("t", "nothing") == ""
    assert t.get("t", "nothing") is None
    assert t.mark_done("t", "nothing") is None


def test_conversations_and_tenants_are_separate_and_bounded() -> None:
    t = tracker(max_tasks=2)
    t.observe("a", "c", Message.user("Goal of tenant a"))
    t.observe("b", "c", Message.user("Goal of tenant b"))
    assert t.get("a", "c").goal == "Goal of tenant a"  # type: ignore[union-attr]
    t.observe("b", "d", Message.user("Another"))  # evicts the least recently used: (b, c)
    assert len(t) == 2
    assert t.get("b", "c") is None
    assert t.get("a", "c") is not None
    assert t.clear("a", "c")
    assert not t.clear("a", "c")


def test_the_tracker_is_thread_safe() -> None:
    t = ActiveTaskTracker(max_steps=1000)
    feed(t, Message.user("Parallel work"))

    def worker(n: int) -> None:
        for i in range(50):
            t.observe("t", "c", call(f"{n}-{i}", "job"))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    task = t.get("t", "c")
    assert task is not None
    assert len(task.steps) == 400


def test_settings_are_checked() -> None:
    with pytest.raises(ConfigError):
        ActiveTaskTracker(max_steps=-1)
    with pytest.raises(ConfigError):
        ActiveTaskTracker(goal_chars=5)


# -- the source --------------------------------------------------------------------------------


async def test_source_catches_up_from_the_history_and_renders() -> None:
    t = tracker()
    source = ActiveTaskSource(t)
    assert (source.name, source.priority) == ("active_task", 1)
    history = CONVERSATION
    block = await source.fetch(
        Turn(Message.user("ok, thanks"), history, tenant="t", conversation="c"), 500
    )
    assert block is not None
    assert block.name == "active_task"
    assert block.content.startswith("Task status: ACTIVE\nGoal: Find me a Rust HTTP framework")
    assert "returned 3 items" in block.content
    # shown again with one more message: only the new one is learnt, nothing doubles
    new = Message.user("Which one is fastest?")
    block = await source.fetch(
        Turn(new, [*history, Message.user("ok, thanks")], tenant="t", conversation="c"), 500
    )
    assert block is not None
    assert "Goal: Which one is fastest?" in block.content
    assert "Completed steps" not in block.content


async def test_source_in_chinese_and_empty() -> None:
    source = ActiveTaskSource(tracker())
    block = await source.fetch(
        Turn(Message.user("帮我比较三个框架"), locale="zh", tenant="t", conversation="z"), 500
    )
    assert block is not None
    assert block.content == "任务状态：进行中\n目标：帮我比较三个框架"
    quiet = ActiveTaskSource(tracker(), observe=False)
    assert await quiet.fetch(Turn(Message.user("hi")), 500) is None


def test_source_in_an_engine_build() -> None:
    t = tracker()
    engine = ContextEngine(counter=HeuristicCounter(), sources=[ActiveTaskSource(t)])
    built = engine.build_sync(
        "Compare axum and actix", history=CONVERSATION, budget=2000, tenant="t", conversation="e"
    )
    report = built.report.block("active_task")
    assert report is not None
    assert report.status == "included"
    text = "\n".join(m.text for m in built.messages)
    assert "<active_task" in text
    assert "Goal: Compare axum and actix" in text


def test_status_for_turn_is_the_engines_task_status_hook() -> None:
    t = tracker()
    engine = ContextEngine(counter=HeuristicCounter(), task_status=t.status_for_turn)
    who = {"budget": 2000, "tenant": "t", "conversation": "h"}
    first = engine.build_sync(CONVERSATION[0], **who)
    # a fresh task has nothing to add to the restated goal
    assert "Task status" not in first.messages[-1].text
    built = engine.build_sync("ok, thanks!", history=CONVERSATION, **who)
    pinned = built.messages[-1].text
    assert pinned.startswith("<current_goal>")
    assert "Task status: ACTIVE\nGoal: Find me a Rust HTTP framework" in pinned  # not the "ok"
    assert "returned 3 items" in pinned
    # An agent loop rebuilds the same request with its tool work so far: the steps are
    # restated, the goal is not said twice.
    request = Message.user("Compare axum and actix")
    engine.build_sync(request, **who)
    work = [
        call("b1", "bench", '{"crates": ["axum", "actix"]}'),
        Message.tool("b1", '{"rows": [1, 2]}'),
    ]
    loop = engine.build_sync(request, history=work, **who)
    pinned = loop.messages[-1].text
    assert "Goal:" not in pinned
    assert 'Completed steps:\n- called bench(crates=["axum", "actix"]) → returned 2 items' in pinned
