"""Memory extraction: the rules as a table of examples, golden conversations, the LLM path.

The rule tables below are the specification of `RuleExtractor`: one (message, expected
items) pair per rule and language, then the sentences that must give nothing —
questions, hypotheticals, quoted or reported speech, negations that would flip the
meaning, conversational filler. The golden files hold what a short conversation gives
(``UPDATE_GOLDEN=1`` rewrites them).

`LLMExtractor` talks to a loopback server speaking OpenAI Chat Completions through the
official SDK (the same approach as ``test_llm.py``): its answer is parsed and
validated, and a timeout, an HTTP error or an answer without JSON falls back to the
rules, saying why.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextwright import ConfigError, Message
from contextwright.llm import OpenAICompatibleLLM
from contextwright.memory import (
    KINDS,
    Extracted,
    Extractor,
    LLMExtractor,
    RuleExtractor,
    dedupe_key,
)
from contextwright.memory._extract_llm import parse_items

from .loopback import CHAT_ERROR, LoopbackServer, chat_completion, serving

GOLDEN = Path(__file__).parent / "golden"
RULES = RuleExtractor()

Row = tuple[str, str, "str | None", int]  # content, category, key, importance


def rows(text: str, locale: str = "auto") -> list[Row]:
    return [
        (x.content, x.category, x.key, x.importance)
        for x in RULES.extract_sync([Message.user(text)], locale=locale)
    ]


# -- English rules -----------------------------------------------------------------------

EN_CASES: list[tuple[str, list[Row]]] = [
    # age (90)
    ("I'm 35", [("User is 35 years old", "fact", "age", 90)]),
    ("I am 35 years old.", [("User is 35 years old", "fact", "age", 90)]),
    ("i'm 35 yo", [("User is 35 years old", "fact", "age", 90)]),
    ("I just turned 40 this year", [("User is 40 years old", "fact", "age", 90)]),
    ("My age is 52", [("User is 52 years old", "fact", "age", 90)]),
    ("I'm 35, can I still apply?", [("User is 35 years old", "fact", "age", 90)]),
    ("My name is Alice Chen", [("User's name is Alice Chen", "fact", "name", 90)]),
    # family (70): keyed when it states the relative's age or name
    ("my daughter is 7", [("User's daughter is 7", "fact", "family.daughter", 70)]),
    ("My daughter Mia is 7 and loves dancing", [("User's daughter Mia is 7 and loves dancing", "fact", "family.daughter", 70)]),
    ("my daughter Mia loves dancing", [("User's daughter Mia loves dancing", "fact", None, 70)]),
    ("My older son is 12", [("User's older son is 12", "fact", "family.son.eldest", 70)]),
    ("I have two kids", [("User has two kids", "fact", "family.children", 70)]),
    ("I'm married", [("User is married", "fact", "marital_status", 70)]),
    # preference (60)
    ("I prefer tea over coffee", [("User prefers tea over coffee", "preference", None, 60)]),
    ("I really like hiking in the Alps", [("User likes hiking in the Alps", "preference", None, 60)]),
    ("I love Italian food!", [("User loves Italian food", "preference", None, 60)]),
    ("I hate long meetings", [("User hates long meetings", "preference", None, 60)]),
    ("I don't like spicy food", [("User doesn't like spicy food", "preference", None, 60)]),
    ("My favourite color is green", [("User's favourite color is green", "preference", None, 60)]),
    ("I'm a big fan of Haruki Murakami", [("User is a big fan of Haruki Murakami", "preference", None, 60)]),
    ("I'm allergic to peanuts", [("User is allergic to peanuts", "fact", None, 90)]),
    # work (85)
    ("I work at Google", [("User works at Google", "fact", "employer", 85)]),
    ("I work for a small startup in Berlin", [("User works for a small startup in Berlin", "fact", "employer", 85)]),
    ("I'm a nurse", [("User is a nurse", "fact", "occupation", 85)]),
    ("I'm a software engineer at Shopify", [("User is a software engineer at Shopify", "fact", "occupation", 85)]),
    ("I work as a data scientist", [("User works as a data scientist", "fact", "occupation", 85)]),
    ("I'm retired", [("User is retired", "fact", "occupation", 85)]),
    # location (75), origin (70)
    ("I live in Berlin, Germany", [("User lives in Berlin, Germany", "fact", "location", 75)]),
    ("I moved to Lisbon last year", [("User moved to Lisbon last year", "fact", "location", 75)]),
    ("I've just moved to Paris", [("User moved to Paris", "fact", "location", 75)]),
    ("I'm originally from Seoul", [("User is from Seoul", "fact", "origin", 70)]),
    # education (90)
    ("I have a master's degree in physics", [("User has a master's degree in physics", "fact", "education", 90)]),
    ("I graduated from MIT in 2012", [("User graduated from MIT in 2012", "fact", "education", 90)]),
    # intent (80)
    ("I'm planning to apply for a visa", [("User is planning to apply for a visa", "intent", None, 80)]),
    ("I plan to retire at 60", [("User plans to retire at 60", "intent", None, 80)]),
    ("I'm going to buy a house next year", [("User is going to buy a house next year", "intent", None, 80)]),
    ("I will start a new job in March", [("User will start a new job in March", "intent", None, 80)]),
    ("Next week I fly to Tokyo", [("Next week, the user will fly to Tokyo", "intent", None, 80)]),
    ("Next month, I'm starting a new job", [("Next month, the user is starting a new job", "intent", None, 80)]),
    ("I'm flying to Tokyo next week", [("User is flying to Tokyo next week", "intent", None, 80)]),
    ("I'm interested in the B visa program", [("User is interested in the B visa program", "intent", None, 80)]),
    ("I want to learn Spanish", [("User wants to learn Spanish", "intent", None, 80)]),
    ("I've decided to quit my job", [("User has decided to quit their job", "intent", None, 80)]),
    # remember (95): the inner statement, ranked high, keeping its own category and key
    ("Remember that my flight is at 9am", [("User's flight is at 9am", "fact", None, 95)]),
    ("Please remember that I'm allergic to shellfish", [("User is allergic to shellfish", "fact", None, 95)]),
    ("Don't forget my wife's birthday is May 3", [("User's wife's birthday is May 3", "fact", None, 95)]),
    ("remember to call my mom tomorrow", [("User asked to be reminded to call their mom tomorrow", "fact", None, 95)]),
    ("Keep in mind that I live in Oslo", [("User lives in Oslo", "fact", "location", 95)]),
    ("Remember that I never eat pork", [("User never eats pork", "fact", None, 95)]),
    # several statements in one message; the subject carries over "and"
    ("I'm 35 and live in Berlin", [("User is 35 years old", "fact", "age", 90), ("User lives in Berlin", "fact", "location", 75)]),
    ("Hi! I'm 35. I work at Acme; I love jazz.", [
        ("User is 35 years old", "fact", "age", 90), ("User works at Acme", "fact", "employer", 85),
        ("User loves jazz", "preference", None, 60),
    ]),
    # quoted titles are restored verbatim
    ('I love the book "Dune"', [('User loves the book "Dune"', "preference", None, 60)]),
]  # fmt: skip

EN_NOTHING = [
    # questions
    "Am I 35?", "am I too old at 35", "Do you think I'm 35?", "Can you tell me what I like?",
    "Do you remember that I'm 35?",
    # hypotheticals
    "What if I moved to Berlin?", "If I were 35, I would apply", "Suppose I live in Paris, what then?",
    "I wish I lived in Paris",
    # quoted and reported speech
    'She said "I love cats"', "My friend told me I'm a nurse", '"I\'m 35," she said.',
    # negations that would flip the meaning
    "I don't live in Berlin anymore", "I'm not a nurse", "I'm not 35", "I no longer work at Google",
    "I used to live in London", "I don't remember that",
    # conversational filler and vague objects
    "I'd like to know more", "I love it!", "I like that idea", "Thanks, I love your answer",
    "I'm a bit confused", "I'm a beginner", "I'm an Italian", "I'm going to ask you something",
    "I'll check and get back to you", "I'll try it", "I'm 100% sure", "I'm 5 minutes late",
    "I'm from the sales team", "I'm planning to", "Hi! I'm Tom.",
    # not about the user
    "The user is 35", "You are 35",
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), EN_CASES, ids=[c[0][:40] for c in EN_CASES])
def test_english_rules(text: str, expected: list[Row]) -> None:
    assert rows(text) == expected


@pytest.mark.parametrize("text", EN_NOTHING)
def test_english_false_positives_give_nothing(text: str) -> None:
    assert rows(text) == []


# -- Chinese rules -----------------------------------------------------------------------

ZH_CASES: list[tuple[str, list[Row]]] = [
    ("我今年35岁", [("用户今年35岁", "fact", "age", 90)]),
    ("我35岁", [("用户35岁", "fact", "age", 90)]),
    ("我今年35了", [("用户今年35岁", "fact", "age", 90)]),
    ("我叫李明", [("用户叫李明", "fact", "name", 90)]),
    ("我女儿今年7岁", [("用户的女儿今年7岁", "fact", "family.daughter", 70)]),
    ("我女儿叫小美", [("用户的女儿叫小美", "fact", "family.daughter", 70)]),
    ("我儿子喜欢踢足球", [("用户的儿子喜欢踢足球", "fact", None, 70)]),
    ("我大女儿今年10岁", [("用户的大女儿今年10岁", "fact", "family.daughter.eldest", 70)]),
    ("我有两个孩子", [("用户有两个孩子", "fact", "family.children", 70)]),
    ("我已婚", [("用户已婚", "fact", "marital_status", 70)]),
    ("我喜欢爬山", [("用户喜欢爬山", "preference", None, 60)]),
    ("我不喜欢香菜", [("用户不喜欢香菜", "preference", None, 60)]),
    ("我更喜欢喝茶", [("用户更喜欢喝茶", "preference", None, 60)]),
    ("我讨厌开会", [("用户讨厌开会", "preference", None, 60)]),
    ("我对花生过敏", [("用户对花生过敏", "fact", None, 90)]),
    ("我在腾讯工作", [("用户在腾讯工作", "fact", "employer", 85)]),
    ("我在互联网行业工作了8年", [("用户在互联网行业工作了8年", "fact", "employer", 85)]),
    ("我是一名护士", [("用户是一名护士", "fact", "occupation", 85)]),
    ("我是程序员", [("用户是程序员", "fact", "occupation", 85)]),
    ("我是做外贸的", [("用户是做外贸的", "fact", "occupation", 85)]),
    ("我住在上海", [("用户住在上海", "fact", "location", 75)]),
    ("我搬到了杭州", [("用户搬到了杭州", "fact", "location", 75)]),
    ("我是上海人", [("用户是上海人", "fact", "origin", 70)]),
    ("我本科毕业于浙江大学", [("用户本科毕业于浙江大学", "fact", "education", 90)]),
    ("我是硕士学历", [("用户是硕士学历", "fact", "education", 90)]),
    ("我打算明年移民香港", [("用户打算明年移民香港", "intent", None, 80)]),
    ("我计划下个月去日本旅游", [("用户计划下个月去日本旅游", "intent", None, 80)]),
    ("下周我要去北京出差", [("用户下周要去北京出差", "intent", None, 80)]),
    ("我下个月要搬到香港", [("用户下个月要搬到香港", "intent", None, 80)]),
    ("我对高才通B类很感兴趣", [("用户对高才通B类很感兴趣", "intent", None, 80)]),
    ("我想申请香港的大学", [("用户想申请香港的大学", "intent", None, 80)]),
    ("记住，我对花生过敏", [("用户对花生过敏", "fact", None, 95)]),
    ("请记住我的生日是5月3日", [("用户的生日是5月3日", "fact", None, 95)]),
    ("别忘了我下周三有面试", [("用户下周三有面试", "fact", None, 95)]),
    # the subject carries over commas: a whole profile in one sentence
    ("我今年35岁，本科毕业于浙江大学，在互联网行业工作了8年", [
        ("用户今年35岁", "fact", "age", 90), ("用户本科毕业于浙江大学", "fact", "education", 90),
        ("用户在互联网行业工作了8年", "fact", "employer", 85),
    ]),
    ("另外，我住在北京", [("用户住在北京", "fact", "location", 75)]),
    # full-width digits read as half width
    ("我今年３５岁了", [("用户今年35岁", "fact", "age", 90)]),
]  # fmt: skip

ZH_NOTHING = [
    "你喜欢什么?", "我喜欢什么？", "我今年多大？", "我35岁能申请吗？",
    "如果我住在上海，会不会更方便？", "假如我35岁，还能申请吗", "要是我在腾讯工作就好了",
    "我住在上海的话，通勤要多久", "希望我明年能移民",
    "他说我喜欢猫", "我妈说我不喜欢吃青菜", "她觉得我是程序员", "他们说“我住在上海”",
    "我不在腾讯工作了", "我不是护士", "我没有住在上海",
    "我喜欢你的回答", "我喜欢这个", "我准备好了", "我想问一下签证的问题", "我在找工作",
    "我住院了", "我是新手", "我是他的老师", "我35岁的时候去过日本", "他是程序员", "我们住在上海",
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), ZH_CASES, ids=[c[0][:20] for c in ZH_CASES])
def test_chinese_rules(text: str, expected: list[Row]) -> None:
    assert rows(text) == expected


@pytest.mark.parametrize("text", ZH_NOTHING)
def test_chinese_false_positives_give_nothing(text: str) -> None:
    assert rows(text) == []


def test_a_question_after_a_statement_keeps_the_statement() -> None:
    assert rows("我35岁，能申请吗？") == [("用户35岁", "fact", "age", 90)]


# -- the extractor's contract ------------------------------------------------------------


def test_every_rule_kind_has_an_importance_in_range() -> None:
    for kind, (category, importance, confidence) in KINDS.items():
        assert category in ("fact", "preference", "intent"), kind
        assert 0 <= importance <= 100, kind
        assert 0 < confidence <= 1, kind
    # the importances of docs/design-notes.md, Memory extraction
    assert KINDS["age"][1] == KINDS["education"][1] == 90
    assert (
        KINDS["employer"][1],
        KINDS["intent"][1],
        KINDS["family"][1],
        KINDS["preference"][1],
    ) == (85, 80, 70, 60)


def test_only_user_messages_are_mined() -> None:
    messages = [
        Message.system("I'm 35 and I live in Berlin."),
        Message.assistant("I'm an assistant. I live in the cloud and I love helping."),
        Message.user("I live in Oslo", id="u1"),
    ]
    (item,) = RULES.extract_sync(messages)
    assert item == Extracted("User lives in Oslo", "fact", 75, "location", ("u1",), 0.9)
    assert isinstance(RULES, Extractor)


def test_a_repeated_statement_is_one_item_with_both_sources() -> None:
    messages = [Message.user("I love jazz.", id="a"), Message.user("I LOVE JAZZ!", id="b")]
    (item,) = RULES.extract_sync(messages)
    assert item.source_message_ids == ("a", "b")


def test_locale_restricts_the_rule_set() -> None:
    text = "I'm 35. 我住在上海。"
    assert [r[0] for r in rows(text)] == ["User is 35 years old", "用户住在上海"]
    assert [r[0] for r in rows(text, "en")] == ["User is 35 years old"]
    assert [r[0] for r in rows(text, "zh")] == ["用户住在上海"]
    with pytest.raises(ConfigError):
        rows(text, "fr")


def test_code_is_not_mined() -> None:
    assert rows("Look at this:\n```python\n# I'm 35\nprint('I live in Berlin')\n```") == []


def test_dedupe_key_folds_width_case_and_punctuation() -> None:
    assert (
        dedupe_key("User likes Tea.")
        == dedupe_key("user  likes tea")
        == dedupe_key("ＵＳＥＲ likes TEA!")
    )
    assert dedupe_key("用户喜欢喝茶。") == dedupe_key("用户喜欢喝茶")
    assert dedupe_key("User is 35") != dedupe_key("User is 36")


async def test_async_extract_is_the_sync_one() -> None:
    messages = [Message.user("我今年35岁", id="x")]
    assert await RULES.extract(messages) == RULES.extract_sync(messages)


# -- golden conversations ------------------------------------------------------------------

CONVERSATIONS = {
    "en": [
        ("user", "Hi! I'm planning to move abroad and need some advice."),
        ("assistant", "Happy to help. Where are you thinking of moving? I love Lisbon myself."),
        (
            "user",
            "I'm 35 and I work at Shopify as a software engineer. My wife and I live in Toronto.",
        ),
        ("assistant", "Great. Do you have children?"),
        ("user", "Yes, my daughter Mia is 7. I prefer cities with good public schools."),
        ("user", "Would Berlin be good if I were single?"),
        ("user", "Remember that I don't speak German. Next year I want to buy a house."),
        ("user", "Thanks, I love it!"),
    ],
    "zh": [
        ("user", "你好，我想咨询一下香港高才通的事情。"),
        ("assistant", "好的，我喜欢帮助别人。请问您的基本情况？"),
        ("user", "我今年35岁，本科毕业于浙江大学，在互联网行业工作了8年。"),
        ("user", "我已婚，有一个3岁的孩子，现在住在杭州。"),
        ("assistant", "明白了。您对哪一类感兴趣？"),
        ("user", "我对高才通B类很感兴趣，我更喜欢文字交流。"),
        ("user", "如果我去香港工作，孩子上学怎么办？"),
        ("user", "记住，我下个月要去香港面试。谢谢！"),
    ],
}


def _golden(locale: str) -> list[dict[str, Any]]:
    messages = [
        Message(role, text, id=f"m{i}") for i, (role, text) in enumerate(CONVERSATIONS[locale], 1)
    ]  # type: ignore[arg-type]
    return [
        dataclasses.asdict(x) | {"source_message_ids": list(x.source_message_ids)}
        for x in RULES.extract_sync(messages)
    ]


@pytest.mark.parametrize("locale", ["en", "zh"])
def test_golden_conversation(locale: str) -> None:
    path = GOLDEN / f"extract_{locale}.json"
    got = _golden(locale)
    if os.environ.get("UPDATE_GOLDEN") or not path.exists():
        path.write_text(json.dumps(got, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    assert got == json.loads(path.read_text(encoding="utf-8"))


# -- LLM extraction over a real loopback server ----------------------------------------------


FakeOpenAI = LoopbackServer  # speaks Chat Completions; tests set answer, delay, status


def respond(server: FakeOpenAI, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    if server.status != 200:
        return server.status, CHAT_ERROR
    return 200, chat_completion(body.get("model", ""), server.answer)


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with serving(LoopbackServer(respond, base_path="/v1", answer="[]")) as srv:
        yield srv


TURN = [
    Message.user("I'm 35 and I live in Berlin.", id="u1"),
    Message.assistant("Nice! Berlin is great.", id="a1"),
    Message.user("I'm planning to apply for a Blue Card.", id="u2"),
]


async def _extract(
    server: FakeOpenAI, messages: list[Message], **kw: Any
) -> tuple[list[Extracted], str]:
    llm = OpenAICompatibleLLM("test-model", base_url=server.url)
    try:
        return await LLMExtractor(llm, **kw).extract_with_method(messages)
    finally:
        await llm.aclose()


async def test_llm_answer_is_parsed_validated_and_attributed(server: FakeOpenAI) -> None:
    server.answer = (
        "Sure! Here is what I found:\n```json\n["
        '{"content": "User is 35 years old", "category": "fact", "importance": 90, "key": "age", "source": 1},'
        '{"content": "User lives in Berlin", "category": "Facts", "importance": "75", "key": "Location"},'
        '{"content": "User plans to apply for a Blue Card", "category": "intent", "importance": 250, "source": 3},'
        '{"content": "", "category": "fact"}, {"content": "x", "category": "gossip"}, "not an object",'
        '{"content": "User likes Berlin", "category": "preference", "key": "bad key!"}'
        "]\n```\nLet me know if you need more."
    )
    llm = OpenAICompatibleLLM("test-model", base_url=server.url)
    extractor = LLMExtractor(llm)
    try:
        items = await extractor.extract(TURN)
    finally:
        await llm.aclose()
    assert extractor.last_method == "llm:openai:test-model"
    assert extractor.last_dropped == 3
    assert [(i.content, i.category, i.importance, i.key, i.source_message_ids) for i in items] == [
        ("User is 35 years old", "fact", 90, "age", ("u1",)),
        (
            "User lives in Berlin",
            "fact",
            75,
            "location",
            ("u1", "u2"),
        ),  # no source: every user message
        ("User plans to apply for a Blue Card", "intent", 100, None, ("u2",)),  # clamped
        (
            "User likes Berlin",
            "preference",
            60,
            None,
            ("u1", "u2"),
        ),  # default importance, key dropped
    ]
    (req,) = server.requests
    system, prompt = (m["content"] for m in req["body"]["messages"])
    assert "never invent" in system
    assert "[1 user] I'm 35 and I live in Berlin." in prompt
    assert "[2 assistant] Nice!" in prompt
    assert "at most 10 items" in prompt


async def test_llm_answer_wrapped_in_an_object_and_max_items(server: FakeOpenAI) -> None:
    server.answer = json.dumps(
        {"memories": [{"content": f"User fact {i}", "category": "fact"} for i in range(5)]}
    )
    items, method = await _extract(server, TURN, max_items=2)
    assert method == "llm:openai:test-model"
    assert [i.content for i in items] == ["User fact 0", "User fact 1"]


async def test_chinese_conversation_gets_the_chinese_prompt(server: FakeOpenAI) -> None:
    server.answer = '[{"content": "用户今年35岁", "category": "fact", "importance": 90, "key": "age", "source": 1}]'
    items, _ = await _extract(server, [Message.user("我今年35岁", id="z")])
    assert items == [Extracted("用户今年35岁", "fact", 90, "age", ("z",), 0.8)]
    prompt = server.requests[0]["body"]["messages"][1]["content"]
    assert "只输出一个 JSON 数组" in prompt


async def test_timeout_falls_back_to_the_rules(server: FakeOpenAI) -> None:
    server.delay = 120.0  # released at teardown: only the deadline can end the call
    items, method = await _extract(server, TURN, deadline=0.3)
    assert server.answered == 0  # the fallback did not wait for the server
    assert method == "rules (fallback: timeout after 0.3s)"
    assert [i.content for i in items] == [
        "User is 35 years old", "User lives in Berlin", "User is planning to apply for a Blue Card",
    ]  # fmt: skip


async def test_invalid_json_falls_back_to_the_rules(server: FakeOpenAI) -> None:
    server.answer = "The user is 35 and lives in Berlin. [not json"
    items, method = await _extract(server, TURN)
    assert method == "rules (fallback: no JSON array in the answer)"
    assert items == RULES.extract_sync(TURN)


async def test_http_error_falls_back_to_the_rules(server: FakeOpenAI) -> None:
    server.status = 500
    items, method = await _extract(server, TURN)
    assert method.startswith(
        "rules (fallback: LLMError: openai:test-model: InternalServerError (HTTP 500)"
    )
    assert len(items) == 3
    assert len(server.requests) == 1


async def test_no_user_message_means_no_call(server: FakeOpenAI) -> None:
    items, _ = await _extract(server, [Message.assistant("I'm 35.")])
    assert items == []
    assert server.requests == []


def test_parse_items_tolerates_fences_prose_and_wrappers() -> None:
    assert parse_items('```json\n[{"a": 1}]\n```') == [{"a": 1}]
    assert parse_items("Here [are] the items: [1, 2] and more") == [1, 2]
    assert parse_items('{"items": [3]}') == [3]
    assert parse_items("[]") == []
    assert parse_items("nothing here") is None
    assert parse_items('{"not": "a list"}') is None


def test_llm_extractor_checks_its_settings() -> None:
    llm = OpenAICompatibleLLM("m", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError):
        LLMExtractor(llm, deadline=0)
    with pytest.raises(ConfigError):
        LLMExtractor(llm, max_items=0)
    with pytest.raises(ConfigError):
        LLMExtractor(llm, prompt="no placeholder")
    custom = LLMExtractor(llm, prompt="Facts as JSON, max {max_items}: {conversation}", max_items=3)
    _, prompt = custom.build_prompt([Message.user("hi {there}")])
    assert prompt == "Facts as JSON, max 3: [1 user] hi {there}"
