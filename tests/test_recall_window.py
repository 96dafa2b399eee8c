"""Recall and the history window meet without a gap and without overlap.

The sources are fetched before the window is decided: recall searches below the
engine's estimate of where the window starts, and a recalled turn the final
window holds is left out of the recall block.
"""

from __future__ import annotations

import re

from contextwright import ContextEngine, Conversations, HeuristicCounter, Message
from contextwright.history import CompactionConfig
from contextwright.stores import SQLiteStore

H = HeuristicCounter()
# no summaries (clear_at_least_tokens=0: the summary triggers decide, not the window's overflow)
_NEVER = CompactionConfig(
    soft_threshold_tokens=10**9, hard_threshold_tokens=10**9,
    summary_message_threshold=10**9, summary_token_threshold=10**9, clear_at_least_tokens=0,
)  # fmt: skip
_QUESTION = re.compile(r"question (\d+) about zebra\1\b")


def _thread(n: int) -> list[Message]:
    return [
        m
        for i in range(n)
        for m in (Message.user(f"question {i} about zebra{i}"), Message.assistant(f"answer {i}"))
    ]


def test_every_turn_is_in_the_prompt_once(tmp_path):
    """Asked about any turn, old or recent, the prompt shows it exactly once.

    Turns in the in-process tail but older than the window are recalled (they
    used to be neither in the window nor searched); turns the window holds are
    not recalled a second time, and the receipt says when one was left out.
    """
    convs = Conversations(
        ContextEngine(counter=H, budget=2000), SQLiteStore(tmp_path / "w.db"), compaction=_NEVER
    )
    convs.append_sync("c", _thread(300), tenant="t", user="u")
    left_out = 0
    for k in range(299, 100, -1):  # from inside the window, through the tail, to the store
        built = convs.build_sync("c", f"what about zebra{k}?", tenant="t", user="u")
        text = "\n".join(m.text for m in built.messages)
        shown = [int(j) for j in _QUESTION.findall(text)]
        assert shown.count(k) == 1, (k, built.report.block("recalled_turns"))
        assert len(shown) == len(set(shown)), k  # no message twice
        reason = built.report.block("recalled_turns").reason
        left_out += "left out" in reason
        convs.append_sync("c", [Message.assistant(f"reply {k}")], tenant="t", user="u")
    assert left_out  # the window's estimate was short at times: the overlap was removed
    convs.close()
