"""The build half of bench_scale_pg.py: cold and warm turns on one scale database.

Two `Conversations` on the database (the bench engine: cl100k, budget 8,000, no
sources), one history-only, one with recall. A round takes the next few
conversations, the same ``c{k}`` in both databases; for each, the history-only
one builds it for the first time (*cold*: nothing of it in this process; the
generated conversations carry no summary yet, so this first build compacts
inline, in both databases alike), then ``turns`` warm turns; then the recall one
runs ``turns`` warm turns after an untimed first build. A turn is a build of a new
user message (timed: it also stores the message) and the reply appended, then the
background work waited for (untimed), as in bench_pg.py.
"""

from __future__ import annotations

import argparse
import time

import make_scale_pg as gen
from bench_history import make_engine, turn_messages
from contextwright import Conversations

__all__ = ["Builds"]


def open_conversations(url: str, now: float, recall: bool) -> Conversations:
    from contextwright.stores.postgres import PostgresBackend

    return Conversations(
        make_engine(now, sources=False), PostgresBackend(url).backend(), recall=recall
    )


class Builds:
    """Cold and warm builds of the measured conversations on one database."""

    def __init__(self, url: str, args: argparse.Namespace) -> None:
        now = gen.T0 + 86_400 * 30
        self.history = open_conversations(url, now, recall=False)
        self.default = open_conversations(url, now, recall=True)
        small = max(1, args.conversations // 100)
        self.per_round = max(1, min(args.convs_per_round, small // (args.rounds + 1)))
        self.small = small
        self.turns = args.turns
        self.questions = turn_messages(64, seed=5)

    def _turn(self, conv: Conversations, k: int, i: int) -> float:
        q, reply = self.questions[(k + i) % len(self.questions)]
        user = gen.conversation_owner(k)
        t = time.perf_counter()
        conv.build_sync(f"c{k}", q, tenant=gen.TENANT, user=user)
        dt = (time.perf_counter() - t) * 1e3
        conv.append_sync(f"c{k}", [reply.replace()], tenant=gen.TENANT, user=user)
        conv.wait_idle_sync(120)
        return dt

    def round(self, r: int) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {"history cold": [], "history warm": [], "default warm": []}
        for j in range(self.per_round):
            k = (r * self.per_round + j) % self.small
            out["history cold"].append(self._turn(self.history, k, 0))
            out["history warm"] += [
                self._turn(self.history, k, i) for i in range(1, self.turns + 1)
            ]
            # untimed: recall's first look at the conversation; other questions and reply ids
            self._turn(self.default, k, 20)
            out["default warm"] += [
                self._turn(self.default, k, 20 + i) for i in range(1, self.turns + 1)
            ]
        return out

    def close(self) -> None:
        self.history.close()
        self.default.close()
