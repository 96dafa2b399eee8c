"""Facts survive compaction: seed facts early in a long conversation, compact, then ask.

`probe` runs one conversation through `Conversations`: an opening stretch in which
the user states facts (a sister's name, a server port, an invoice number...) between
ordinary turns, then ``compactions`` rounds of filler each followed by a forced
`compact` (no other summary is made: the triggers are off, so the count is
exact), then one build per fact with its question (``store_message=False``). A
fact is *present* when its answer is in the built context outside the history
window — the summary, the recalled turns, or the user's memories — and the probe
says where. It also checks that every fact's exact turn is still recoverable:
stored verbatim (`Conversations.messages`) and, for a fact inside a large tool
result that was offloaded, readable through `Conversations.read_back`.

The conversations (`corpus`): English and Chinese chats (filler drawn from a
topic pool), a tool-heavy agent session (the replay trace's tool turns, with facts
stated by the assistant and hidden in large tool results), and LoCoMo dev
conversations (their turns as the filler, the facts seeded into the first session).
Everything is seeded: a run replays the same conversations.

Used by `bench_probe_facts.py` (the table) and `tests/test_probe_facts.py`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from _cache_trace import agent_trace
from contextwright import BuiltContext, Conversations, Message, ToolCallPart

__all__ = ["Fact", "ProbeResult", "Script", "corpus", "probe"]

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo"


@dataclass(frozen=True)
class Fact:
    """A fact seeded as ``message`` (followed by ``reply``), asked about with ``question``."""

    message: Message
    question: str
    answer: str
    reply: Message | None = None
    extra: tuple[Message, ...] = ()  # e.g. the tool call a tool-result fact answers


@dataclass
class Script:
    """One conversation to probe: the opening (facts among ``opening``), the filler rounds."""

    name: str
    kind: str  # "en", "zh", "tools", "locomo"
    opening: list[Message | Fact]
    rounds: list[list[Message]]  # filler before each compaction, at least as many as asked

    @property
    def facts(self) -> list[Fact]:
        return [f for f in self.opening if isinstance(f, Fact)]


_NAMES = ["Priya", "Okonkwo", "Mathilde", "Tomasz", "Yuki", "Beatriz", "Anselm", "Farida"]
_ALLERGENS = ["shellfish", "peanuts", "penicillin", "sesame", "kiwi", "latex"]
_REGIONS = ["eu-west-3", "us-east-2", "ap-south-1", "ca-central-1", "eu-north-1"]
_INSTRUMENTS = ["cello", "oboe", "bassoon", "harp", "trombone", "viola"]
_CITIES = ["Lisbon", "Osaka", "Tallinn", "Montevideo", "Nairobi", "Quebec"]
_DBS = ["CockroachDB", "DuckDB", "ClickHouse", "FoundationDB", "ScyllaDB"]
_MONTHS = ["March", "April", "June", "August", "October", "November"]
_COMPANIES = ["Acme", "Globex", "Initech", "Umbrella", "Hooli", "Vandelay"]


def _en_facts(rng: random.Random) -> list[Fact]:
    name, allergen, region = rng.choice(_NAMES), rng.choice(_ALLERGENS), rng.choice(_REGIONS)
    port, budget = rng.randint(2000, 9999), rng.randint(11, 99) * 500
    date = f"{rng.choice(_MONTHS)} {rng.randint(2, 28)}"
    inst, city, db = rng.choice(_INSTRUMENTS), rng.choice(_CITIES), rng.choice(_DBS)
    company, inv = rng.choice(_COMPANIES), f"INV-{rng.randint(10000, 99999)}"
    limit, pw = rng.randint(12, 90) * 10, f"{rng.choice(_NAMES).lower()}-{rng.randint(100, 999)}"
    flight = f"{rng.choice(_MONTHS)} {rng.randint(2, 28)}"
    raw = [
        (f"By the way, my sister's name is {name}.", "What is my sister's name?", name),
        (f"Note for later: the staging server runs on port {port}.",
         "Which port does the staging server run on?", str(port)),
        (f"Our offsite budget is capped at {budget} euros.",
         "What is the cap on our offsite budget?", str(budget)),
        (f"I'm allergic to {allergen}, please keep that in mind.", "What am I allergic to?",
         allergen),
        (f"The production cluster lives in the {region} region.",
         "Which region does the production cluster live in?", region),
        (f"The contract renewal is due on {date}.", "When is the contract renewal due?", date),
        (f"My daughter has started learning the {inst}.",
         "Which instrument has my daughter started learning?", inst),
        (f"The API rate limit we agreed with the vendor is {limit} requests per minute.",
         "What API rate limit did we agree with the vendor?", str(limit)),
        (f"My flight to {city} leaves on {flight}.", f"When does my flight to {city} leave?",
         flight),
        (f"The invoice number for the {company} order is {inv}.",
         f"What is the invoice number for the {company} order?", inv),
        (f"My favourite database these days is {db}.", "Which database is my favourite?", db),
        (f"Remember that the wifi password at the cabin is {pw}.",
         "What is the wifi password at the cabin?", pw),
    ]  # fmt: skip
    return [Fact(Message.user(s), q, a, Message.assistant(rng.choice(_ACKS_EN))) for s, q, a in raw]


_NAMES_ZH = ["李思远", "王雨桐", "陈嘉怡", "赵明轩", "周若溪", "孙浩然"]
_ALLERGENS_ZH = ["花生", "海鲜", "青霉素", "芒果", "芝麻"]
_INSTRUMENTS_ZH = ["大提琴", "古筝", "单簧管", "琵琶", "小号"]
_PLACES_ZH = ["华东二区", "华北三区", "华南一区", "西南一区"]
_COMPANIES_ZH = ["星河科技", "蓝海物流", "青松医疗", "远航教育"]


def _zh_facts(rng: random.Random) -> list[Fact]:
    name, allergen, inst = (
        rng.choice(_NAMES_ZH),
        rng.choice(_ALLERGENS_ZH),
        rng.choice(_INSTRUMENTS_ZH),
    )
    place, company = rng.choice(_PLACES_ZH), rng.choice(_COMPANIES_ZH)
    port, budget = rng.randint(2000, 9999), rng.randint(11, 99) * 500
    date = f"{rng.randint(1, 12)}月{rng.randint(1, 28)}日"
    inv, plate = f"FP{rng.randint(100000, 999999)}", f"沪A{rng.randint(10000, 99999)}"
    raw = [
        (f"顺便说一下，我妹妹叫{name}。", "我妹妹叫什么名字？", name),
        (f"记一下：测试服务器的端口是{port}。", "测试服务器的端口是多少？", str(port)),
        (f"我们团建的预算上限是{budget}元。", "团建的预算上限是多少？", str(budget)),
        (f"我对{allergen}过敏，请记住。", "我对什么过敏？", allergen),
        (f"合同续签的截止日期是{date}。", "合同续签的截止日期是哪天？", date),
        (f"我女儿最近开始学{inst}了。", "我女儿最近开始学什么乐器？", inst),
        (f"生产集群部署在{place}。", "生产集群部署在哪个区？", place),
        (f"{company}订单的发票号是{inv}。", f"{company}订单的发票号是多少？", inv),
        (f"我的车牌号是{plate}。", "我的车牌号是多少？", plate),
    ]
    return [Fact(Message.user(s), q, a, Message.assistant(rng.choice(_ACKS_ZH))) for s, q, a in raw]


_ACKS_EN = ["Got it, noted.", "Thanks, I'll remember that.", "Understood.", "Noted!"]
_ACKS_ZH = ["好的，记下了。", "明白了。", "收到，我会记住。"]
_TOPICS_EN = [
    "the quarterly roadmap", "our hiring plan", "the new onboarding docs", "the weekend hike",
    "the database migration", "a birthday present for my dad", "the flaky login test",
    "the kitchen renovation", "the conference talk", "the garden", "the marketing budget",
    "the server costs", "the team retro", "a recipe for dinner", "the holiday schedule",
]  # fmt: skip
_TOPICS_ZH = [
    "季度规划", "招聘计划", "新员工培训文档", "周末爬山", "数据库迁移", "给爸爸的生日礼物",
    "登录测试不稳定", "厨房装修", "会议演讲", "花园", "市场预算", "服务器费用", "团队复盘",
]  # fmt: skip
_VERBS_EN = ["review", "plan", "sort out", "rethink", "finish", "start on", "look into"]


def _chat_en(rng: random.Random, n: int) -> list[Message]:
    out: list[Message] = []
    for _ in range(n):
        topic = rng.choice(_TOPICS_EN)
        out.append(Message.user(
            f"Can you help me {rng.choice(_VERBS_EN)} {topic}? I have about "
            f"{rng.randint(2, 9)} hours this week and I keep getting distracted by other things."
        ))  # fmt: skip
        steps = ", then ".join(rng.sample(
            ["list the open questions", "block an hour each morning", "ask the team for input",
             "write a one-page draft", "set a deadline", "drop the least useful part",
             "check last month's notes"], 3,
        ))  # fmt: skip
        out.append(Message.assistant(
            f"Sure. For {topic} I would {steps}. Start small and keep the scope tight; "
            f"you can extend it once the first part works."
        ))  # fmt: skip
    return out


def _chat_zh(rng: random.Random, n: int) -> list[Message]:
    out: list[Message] = []
    for _ in range(n):
        topic = rng.choice(_TOPICS_ZH)
        out.append(Message.user(
            f"你能帮我安排一下{topic}吗？这周我大概有{rng.randint(2, 9)}个小时，总是被别的事打断。"
        ))  # fmt: skip
        steps = "，然后".join(rng.sample(
            ["列出未解决的问题", "每天早上留出一个小时", "征求团队意见", "先写一页草稿",
             "定一个截止时间", "去掉最不重要的部分", "看看上个月的笔记"], 3,
        ))  # fmt: skip
        out.append(Message.assistant(f"好的。关于{topic}，建议先{steps}。从小处开始，范围控制住。"))
    return out


def _interleave(rng: random.Random, facts: Sequence[Fact], filler: list[Message]) -> list:
    """The facts among the filler's exchanges (pairs), in order."""
    pairs = [filler[i : i + 2] for i in range(0, len(filler), 2)]
    slots = sorted(rng.sample(range(len(pairs) + 1), len(facts)))
    out: list[Message | Fact] = []
    k = 0
    for i, pair in enumerate(pairs):
        while k < len(facts) and slots[k] == i:
            out.append(facts[k])
            k += 1
        out.extend(pair)
    out.extend(facts[k:])
    return out


def _chat_script(kind: str, seed: int, rounds: int, filler: int) -> Script:
    rng = random.Random(seed)
    chat = _chat_en if kind == "en" else _chat_zh
    facts = _en_facts(rng) if kind == "en" else _zh_facts(rng)
    opening = _interleave(rng, facts, chat(rng, len(facts) + 4))
    return Script(f"{kind}-{seed}", kind, opening, [chat(rng, filler) for _ in range(rounds)])


def _tool_script(seed: int, rounds: int, filler: int) -> Script:
    """An agent session: the replay trace's turns, facts from the assistant and in tool results."""
    rng = random.Random(seed)
    events = list(agent_trace(8 + rounds * filler, seed))
    msgs = [m for e in events for m in e.messages]
    build, step = f"b-{rng.randint(1000, 9999)}", rng.choice(["lint", "migrate", "package"])
    owner, flag = rng.choice(_NAMES), f"use_{rng.choice(['fast', 'lazy', 'strict'])}_cache"
    branch, ticket = (
        f"fix/{rng.choice(['refund', 'login', 'quota'])}-{rng.randint(10, 99)}",
        (f"OPS-{rng.randint(1000, 9999)}"),
    )
    said = [
        (f"The deploy log shows that build {build} failed at the {step} step.",
         "Which build failed in the deploy log?", build),
        (f"The CODEOWNERS file says {owner} owns the billing module.",
         "Who owns the billing module according to CODEOWNERS?", owner),
        (f"The feature flag that guards the new cache is {flag}.",
         "Which feature flag guards the new cache?", flag),
        (f"I pushed the fix to the branch {branch}.", "Which branch did you push the fix to?",
         branch),
    ]  # fmt: skip
    facts = [Fact(Message.assistant(s), q, a) for s, q, a in said]
    # a fact inside a large tool result: offloaded, readable through read-back
    call = ToolCallPart("call_ticket", "read_file", json.dumps({"path": "docs/incidents.md"}))
    rows = [f"- incident {i}: {rng.choice(['timeout', 'oom', 'dns'])} on worker {i % 7}"
            for i in range(400)]  # fmt: skip
    rows.insert(211, f"- the outage ticket is {ticket}")
    ask = Message.assistant("Let me read the incidents file.", tool_calls=[call])
    facts.append(Fact(
        Message.tool(call.id, "\n".join(rows), tool_name="read_file"),
        "What is the outage ticket number in the incidents file?", ticket,
        Message.assistant(f"The incidents file names the outage ticket {ticket}."), (ask,),
    ))  # fmt: skip
    head, rest = msgs[:40], msgs[40:]
    cut = [i for i in range(len(head)) if head[i].role == "user"]
    opening: list[Message | Fact] = []
    slots = set(rng.sample(cut[1:], min(len(facts), len(cut) - 1)))
    k = 0
    for i, m in enumerate(head):
        if i in slots and k < len(facts):
            opening.append(facts[k])
            k += 1
        opening.append(m)
    opening.extend(facts[k:])
    size = max(1, len(rest) // max(1, rounds))
    chunks = [rest[i * size : (i + 1) * size] for i in range(rounds)]
    return Script(f"tools-{seed}", "tools", opening, [_whole_units(c) for c in chunks])


def _whole_units(chunk: list[Message]) -> list[Message]:
    """``chunk`` without a tool result cut from its call at either end."""
    start = 0
    while start < len(chunk) and chunk[start].role == "tool":
        start += 1
    end = len(chunk)
    while end > start and (chunk[end - 1].tool_calls or chunk[end - 1].role == "tool"):
        end -= 1
    return chunk[start:end]


def _locomo_scripts(rounds: int, limit: int | None) -> Iterator[Script]:
    from contextwright.interfaces.eval._locomo_data import load_locomo

    files = sorted(LOCOMO.glob("*.json"))[:limit] if LOCOMO.is_dir() else []
    for i, path in enumerate(files):
        conv = load_locomo(path)[0]
        rng = random.Random(100 + i)
        msgs = conv.messages
        head, rest = msgs[:30], msgs[30:]
        facts = _en_facts(rng)
        opening: list[Message | Fact] = []
        slots = sorted(rng.sample(range(2, len(head)), len(facts)))
        k = 0
        for j, m in enumerate(head):
            while k < len(facts) and slots[k] == j:
                opening.append(facts[k])
                k += 1
            opening.append(m)
        size = max(1, len(rest) // rounds)
        chunks = [rest[r * size : (r + 1) * size] for r in range(rounds)]
        yield Script(f"locomo-{path.stem}", "locomo", opening, chunks)


def corpus(
    rounds: int = 5, per_kind: int = 2, filler: int = 40, locomo: int | None = None
) -> list[Script]:
    """The conversations to probe: ``per_kind`` English, Chinese and tool-heavy ones, and up
    to ``locomo`` LoCoMo dev conversations (all there are with None; 0: none)."""
    out: list[Script] = []
    for s in range(per_kind):
        out.append(_chat_script("en", 11 + s, rounds, filler))
        out.append(_chat_script("zh", 21 + s, rounds, filler))
        out.append(_tool_script(31 + s, rounds, filler))
    if locomo != 0:
        out.extend(_locomo_scripts(rounds, locomo))
    return out


@dataclass
class ProbeResult:
    """Where each fact was found after ``compactions`` compactions (None: missing)."""

    script: str
    kind: str
    compactions: int
    found: list[tuple[Fact, str | None]] = field(default_factory=list)
    summaries: int = 0

    @property
    def present(self) -> int:
        return sum(1 for _, where in self.found if where is not None)


def _where(built: BuiltContext, fact: Fact) -> str | None:
    """The part of the built context holding the fact's answer, outside the window."""
    for m in built.messages:
        if fact.answer not in m.text:
            continue
        if m.role == "system" and "<current_goal" not in m.text and m is not built.messages[0]:
            return "summary"
        if m.metadata.get("contextwright") == "turn_context" or m.role == "system":
            if "<user_memory" in m.text:
                memory = m.text[m.text.index("<user_memory") :]
                memory = memory[: memory.find("</user_memory>") + 1 or None]
                if fact.answer in memory:
                    return "memory"
            return "recall"
        return "window"
    return None


def probe(
    convs: Conversations, script: Script, compactions: int, cid: str | None = None
) -> ProbeResult:
    """Run ``script`` through ``convs`` with ``compactions`` forced compactions, then ask."""
    cid = cid or f"{script.name}-{compactions}"
    seqs: list[tuple[Fact, int]] = []
    for item in script.opening:
        if isinstance(item, Fact):
            stored = convs.append_sync(cid, [*item.extra, item.message])
            seqs.append((item, stored[-1].seq or 0))
            if item.reply is not None:
                convs.append_sync(cid, [item.reply])
        else:
            convs.append_sync(cid, [item])
    for r in range(compactions):
        convs.append_sync(cid, script.rounds[r])
        convs.compact_sync(cid)
    result = ProbeResult(script.name, script.kind, compactions)
    result.summaries = len(convs.run_sync(convs.backend.summaries.summaries(cid, tenant="default")))
    for fact, seq in seqs:
        built = convs.build_sync(cid, fact.question, store_message=False)
        result.found.append((fact, _where(built, fact)))
        _recoverable(convs, cid, fact, seq)
    return result


def _recoverable(convs: Conversations, cid: str, fact: Fact, seq: int) -> None:
    """The fact's exact turn is stored verbatim, and a large tool result is readable back."""
    log = convs.backend.conversations
    stored = convs.run_sync(log.read(cid, tenant="default", after_seq=seq - 1, upto_seq=seq))
    if not stored or stored[0].parts != fact.message.parts:
        raise AssertionError(f"{cid}: the turn at seq {seq} is not the fact's, verbatim")
    for part in fact.message.tool_results:
        key = f"tool:{part.call_id}"
        first = convs.read_back_sync(cid, key, 1)
        header, _, text = first.partition("\n")
        pages = int(header.rstrip("]").rsplit(" ", 1)[-1])
        for page in range(2, pages + 1):
            text += convs.read_back_sync(cid, key, page).partition("\n")[2]
        if text != part.content:
            raise AssertionError(f"{cid}: the offloaded result {key} does not read back whole")
