"""Agent traces: what each tool keeps of one long tool-calling turn under a budget.

The trace is the typical coding agent's: one user message, then 20 tool call/result
pairs (file reads, searches, test runs; ~21,000 o200k tokens in all, seeded, so every
run builds the same trace). Each tool gets the trace and a new user message ("What
next?") at budgets 3,000 / 8,000 / 16,000 / 30,000, all counting with o200k_base and
contextwright's per-message accounting:

* **contextwright** ``ContextEngine.build`` (history only, a one-line system prompt),
  and ``build(None)``: the agent's next step with no new user message;
* **LangChain** ``trim_messages`` (strategy ``"last"``, ``start_on="human"``,
  ``include_system=True``, the same o200k counter, ``max_tokens`` the budget less
  the reply priming);
* **LlamaIndex** ``Memory.from_defaults(token_limit=budget)``: ``put_messages``
  then ``get`` (its defaults: 70 % of the limit for the chat history).

For each: the tokens of what it returns and the tool steps (assistant turns with
tool calls) it keeps, of 20. Run: ``python bench/bench_agent.py [--json out.json]``
(a few seconds; needs the ``bench`` extra for the peers).
"""

# No `from __future__ import annotations`: trim_messages tells a per-message counter
# from a per-list one by the real annotation object of its parameter.
import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from langchain_core.messages import AIMessage, BaseMessage, trim_messages

from _peers import lc_tokens, li_tokens, to_langchain, to_llamaindex
from contextwright import ContextEngine, Message, TiktokenCounter, ToolCallPart
from contextwright.tokens._exact import load_tiktoken_encoding
from contextwright.tokens._frame import DEFAULT_OVERHEAD

ENC = load_tiktoken_encoding("o200k_base")
PER_MESSAGE = DEFAULT_OVERHEAD.per_message
PER_TOOL_CALL = DEFAULT_OVERHEAD.per_tool_call
PER_TOOL_RESULT = DEFAULT_OVERHEAD.per_tool_result
REPLY_PRIMING = DEFAULT_OVERHEAD.reply_priming
BUDGETS = (3000, 8000, 16000, 30000)
SYSTEM_PROMPT = "You are a coding agent. Use the tools to investigate, then fix the problem."
TASK = (
    "The nightly build of the payments service fails since Tuesday with a timeout in "
    "the refund tests. Find the cause and propose a fix."
)
QUERY = "What next?"


def n_tokens(text: str) -> int:
    return len(ENC.encode_ordinary(text))


def _code(rnd: random.Random, module: str, lines: int) -> str:
    out = [f'"""{module}: refunds and retries."""', "", "import asyncio", "import logging", ""]
    for k in range(lines // 4):
        name = rnd.choice(["refund", "capture", "retry", "settle", "notify", "ledger"])
        out += [
            f"async def {name}_{k}(order_id: str, amount_cents: int, *, timeout: float = 3.0):",
            f"    log.debug('{name} %s %d', order_id, amount_cents)",
            f"    return await client.post('/v2/{name}', json={{'id': order_id}}, timeout=timeout)",
            "",
        ]
    return "\n".join(out)


def _tests(rnd: random.Random, n: int) -> str:
    out = ["============================= test session starts =============================="]
    for k in range(n):
        status = rnd.choice(["PASSED"] * 6 + ["FAILED"])
        out.append(f"tests/test_refunds.py::test_refund_case_{k} {status}")
        if status == "FAILED":
            out += [
                "    raise asyncio.TimeoutError()",
                f"E   asyncio.exceptions.TimeoutError: refund_{k} took 3.02s (limit 3.0s)",
            ]
    out.append(f"==== {n} tests collected in 4.21s ====")
    return "\n".join(out)


def _grep(rnd: random.Random, n: int) -> str:
    return "\n".join(
        f"src/payments/{rnd.choice(['refunds', 'client', 'ledger', 'retry'])}.py:{rnd.randint(1, 900)}:"
        f"    timeout={rnd.choice(['3.0', 'settings.REFUND_TIMEOUT', 'None', '30'])},"
        for _ in range(n)
    )


def agent_trace(steps: int = 20, seed: int = 18) -> list[Message]:
    """One user message and ``steps`` tool call/result pairs (~21k o200k tokens at 20)."""
    rnd = random.Random(seed)
    history = [Message.user(TASK)]
    for i in range(steps):
        kind = ("read_file", "run_tests", "grep")[i % 3]
        if kind == "read_file":
            args = {"path": f"src/payments/module_{i}.py"}
            result = _code(rnd, args["path"], 64)
        elif kind == "run_tests":
            args = {"path": "tests/test_refunds.py", "verbose": True}
            result = _tests(rnd, 60)
        else:
            args = {"pattern": "timeout=", "path": "src/payments"}
            result = _grep(rnd, 60)
        call = ToolCallPart(f"call_{i:02d}", kind, json.dumps(args))
        note = f"Step {i + 1}: {kind.replace('_', ' ')} to narrow down the timeout."
        history.append(Message.assistant(note, tool_calls=[call]))
        history.append(Message.tool(call.id, result, tool_name=kind))
    return history


def lc_count(message: BaseMessage) -> int:
    return lc_tokens(message, n_tokens)


def run(budget: int, history: list[Message]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    counter = TiktokenCounter("o200k_base")
    for label, message in (("contextwright build", QUERY), ("contextwright build(None)", None)):
        engine = ContextEngine(system_prompt=SYSTEM_PROMPT, counter=counter)
        built = engine.build_sync(message, history=history, budget=budget)
        for p in ("openai", "anthropic", "responses"):
            built.render(p)  # validated: raises on a rule the provider enforces
        steps = sum(1 for m in built.messages if m.role == "assistant" and m.tool_calls)
        opener = "verbatim" if history[0] in built.messages else "placeholder"
        rows.append(
            {"tool": label, "budget": budget, "tokens": built.report.used, "steps": steps,
             "note": f"task message {opener}; warnings: {len(built.report.warnings)}"}
        )  # fmt: skip

    lc_in = to_langchain(history, QUERY, SYSTEM_PROMPT)
    out = trim_messages(
        lc_in, max_tokens=budget - REPLY_PRIMING, token_counter=lc_count, strategy="last",
        start_on="human", include_system=True, allow_partial=False,
    )  # fmt: skip
    rows.append(
        {"tool": "langchain trim_messages", "budget": budget,
         "tokens": REPLY_PRIMING + sum(lc_count(m) for m in out),
         "steps": sum(1 for m in out if isinstance(m, AIMessage) and m.tool_calls),
         "note": f"{len(out)} messages"}
    )  # fmt: skip

    from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
    from llama_index.core.memory import Memory

    mem = Memory.from_defaults(
        session_id=f"agent-{budget}", token_limit=budget, tokenizer_fn=ENC.encode_ordinary
    )
    li_in = [ChatMessage(role="system", content=SYSTEM_PROMPT), *to_llamaindex(history)]
    mem.put_messages([*li_in, ChatMessage(role="user", content=QUERY)])
    got = mem.get()
    rows.append(
        {"tool": "llamaindex Memory.get", "budget": budget, "tokens": li_tokens(got, n_tokens),
         "steps": sum(1 for m in got if any(isinstance(b, ToolCallBlock) for b in m.blocks)),
         "note": f"{len(got)} messages"}
    )  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args()
    history = agent_trace()
    total = sum(
        PER_MESSAGE
        + n_tokens(m.text)
        + sum(PER_TOOL_CALL + n_tokens(c.name) + n_tokens(c.arguments) for c in m.tool_calls)
        + sum(PER_TOOL_RESULT + n_tokens(r.call_id) for r in m.tool_results)
        for m in history
    )
    print(f"trace: 1 user message + 20 tool steps, {len(history)} messages, {total} o200k tokens")
    rows = [r for b in BUDGETS for r in run(b, history)]
    print(f"| {'budget':>6} | {'tool':<26} | {'tokens':>6} | {'steps kept':>10} | note")
    print(f"|{'-' * 8}|{'-' * 28}|{'-' * 8}|{'-' * 12}|------")
    for r in rows:
        print(
            f"| {r['budget']:>6,} | {r['tool']:<26} | {r['tokens']:>6,} | "
            f"{r['steps']:>7} / 20 | {r['note']}"
        )
    if args.json:
        args.json.write_text(json.dumps({"trace_tokens": total, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
