"""An OpenAI Agents SDK agent with a contextwright session: offline, against a local fake model.

    pip install 'contextwright[agents]'
    python examples/openai_agents_session.py

A tiny HTTP server on 127.0.0.1 stands in for the OpenAI Responses API (``POST
/responses``): a scripted model that calls a tool to save each note and answers from
what it was sent. The agent runs 24 turns under a 1,000-token budget, then is asked for
a fact given in the first turn, long out of the window: contextwright's recall brings
that turn back. The last line is a JSON summary (the test suite runs this file).
"""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agents import Agent, OpenAIResponsesModel, Runner, function_tool
from openai import AsyncOpenAI
from rich.console import Console

from contextwright import ContextEngine, Conversations, Message, count_messages
from contextwright.adapters import from_responses
from contextwright.integrations.openai_agents import ContextwrightSession

BUDGET = 1000
bodies: list[dict[str, Any]] = []  # every request the fake model received


def reply(n: int, output: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"resp_{n}", "object": "response", "created_at": 1_700_000_000, "model": "gpt-4o",
        "status": "completed", "output": [output], "parallel_tool_calls": True,
        "tool_choice": "auto", "tools": [],
    }  # fmt: skip


def scripted_model(body: dict[str, Any]) -> dict[str, Any]:
    """What a model would answer here."""
    n = len(bodies)
    items = [
        i for i in body["input"]
        if i.get("role") != "system" and not str(i.get("content", "")).startswith("<context>")
    ]  # fmt: skip
    if items[-1].get("type") == "function_call_output":
        text = "Saved."
    elif items[-1]["content"].startswith("Note"):
        args = json.dumps({"text": items[-1]["content"]})
        call = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}",
                "name": "save_note", "arguments": args, "status": "completed"}  # fmt: skip
        return reply(n, call)
    else:
        found = re.findall(r"locker code is (\d+)", json.dumps(body["input"]))
        text = f"Your locker code is {found[0]}." if found else "I don't know."
    message = {"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": text, "annotations": []}]}  # fmt: skip
    return reply(n, message)


class FakeResponsesAPI(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        data = json.dumps(scripted_model(body)).encode()
        bodies.append(body)
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@function_tool
def save_note(text: str) -> str:
    """Save a note for the user."""
    return f"saved ({len(text)} characters)"


async def main(folder: Path, url: str) -> None:
    client = AsyncOpenAI(base_url=url, api_key="not-needed-offline")
    agent = Agent(
        name="notes", instructions="You keep the user's notes.", tools=[save_note],
        model=OpenAIResponsesModel(model="gpt-4o", openai_client=client),
    )  # fmt: skip
    engine = ContextEngine(budget=BUDGET)
    with Conversations(engine, folder / "chat.db") as convs:
        session = ContextwrightSession("notes", convs, user="ana")
        config = session.run_config(tracing_disabled=True)  # the budgeted build per model call
        await Runner.run(agent, "My locker code is 4417.", session=session, run_config=config)
        for i in range(22):
            note = f"Note {i}: call the caterer about the cake and the chairs."
            await Runner.run(agent, note, session=session, run_config=config)
        result = await Runner.run(
            agent, "What is my locker code?", session=session, run_config=config
        )
        print(result.final_output)
        assert session.report is not None
        Console().print(session.report.to_table())  # the receipt of the last build
        stored = [m async for m in convs.messages("notes", user="ana")]
    sent = []
    for body in bodies:  # what the model received, by the engine's own count
        messages = [Message.system(body["instructions"]), *from_responses(body["input"])]
        sent.append(count_messages(engine.counter, messages, engine.overhead))
    print(json.dumps({
        "answer": result.final_output, "budget": BUDGET, "max_tokens_sent": max(sent),
        "model_calls": len(sent), "messages_stored": len(stored),
    }))  # fmt: skip


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeResponsesAPI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(main(Path(tmp), f"http://{host!s}:{port}"))
    finally:
        server.shutdown()
