"""The conversations of the scale data set: windows of two long seeded threads.

Making 10,000 threads of 100 messages one by one with ``synthetic_thread`` would
spend minutes building its JSON row pool again for each. Instead conversation
``c{k}`` is a window of ``n`` consecutive messages of one of two long threads,
starting at a user message chosen by ``k``: the English one of
``bench_history.synthetic_thread`` (questions, answers, 1 assistant turn in 5
calling a tool whose result is 1-8 KB of JSON), and, for every tenth
conversation, the same structure with the questions and answers written in
Chinese. Message ids, tool call ids and times are the thread's, so they are
unique within a conversation; a window depends only on ``k`` (prefix-stable:
``c{k}`` is the same in every database). The generator prepares each message of
the two threads once and reuses it in every window that holds it.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence

from bench_history import synthetic_thread
from contextwright import Message
from contextwright.model._parts import TextPart

__all__ = ["POOL", "conversation", "pool", "window"]

POOL = 20_000  # messages in the English thread (the Chinese one has a tenth)

_ZH = [
    "我",
    "你",
    "的",
    "是",
    "了",
    "在",
    "有",
    "这个",
    "订单",
    "退款",
    "发货",
    "物流",
    "客户",
    "请问",
    "可以",
    "需要",
    "已经",
    "还是",
    "什么",
    "时候",
    "上海",
    "北京",
    "深圳",
    "广州",
    "杭州",
    "成都",
    "仓库",
    "库存",
    "发票",
    "价格",
    "数量",
    "状态",
    "处理",
    "取消",
    "确认",
    "更新",
    "地址",
    "电话",
    "邮件",
    "周末",
    "明天",
    "今天",
    "昨天",
    "快递",
    "包裹",
    "问题",
    "情况",
    "政策",
    "规定",
    "申请",
    "审核",
    "通过",
    "拒绝",
    "等待",
    "咖啡",
    "绿茶",
    "火锅",
    "面条",
    "旅行",
    "读书",
    "钢琴",
    "围棋",
    "互联网",
    "金融",
    "教育",
    "医疗",
    "设计",
    "零售",
]


def _zh_text(rng: random.Random, like: str) -> str:
    """Chinese text about as many characters as ``like`` has words x 2."""
    n = max(3, min(len(like.split()), 150))
    out = "".join(rng.choice(_ZH) for _ in range(n))
    return out + rng.choice("。？！")


@functools.lru_cache(maxsize=2)
def pool(chinese: bool) -> tuple[Message, ...]:
    """The long thread windows are cut from (English, or its Chinese twin)."""
    if not chinese:
        return tuple(synthetic_thread(POOL))
    rng = random.Random(86)
    out = []
    for m in synthetic_thread(POOL // 10, seed=4048):
        if m.role in ("user", "assistant") and m.text and not m.tool_calls:
            parts = tuple(TextPart(_zh_text(rng, m.text)) if isinstance(p, TextPart) else p
                          for p in m.parts)  # fmt: skip
            m = m.replace(parts=parts)
        out.append(m)
    return tuple(out)


@functools.lru_cache(maxsize=2)
def _starts(chinese: bool, n: int) -> tuple[int, ...]:
    thread = pool(chinese)
    return tuple(i for i, m in enumerate(thread[: len(thread) - n]) if m.role == "user")


def window(k: int, n: int) -> tuple[bool, int]:
    """(Chinese?, first index) of conversation ``k``'s ``n`` messages."""
    chinese = k % 10 == 9
    starts = _starts(chinese, n)
    return chinese, starts[(k * 7_919 + 13) % len(starts)]


def conversation(k: int, n: int) -> Sequence[Message]:
    """The ``n`` messages of conversation ``c{k}``."""
    chinese, first = window(k, n)
    return pool(chinese)[first : first + n]
