"""The `LLM` protocol: the one call summaries and memory extraction need from a model.

LLM summaries and memory extraction ask a model for a short text
answer to one prompt, nothing more: no chat history, no tools, no streaming. So the
contract is a single coroutine, ``complete(prompt, system=, max_tokens=)``, and a
``name`` that reports and summaries quote (``method="llm:<name>"``). Anything that
has those two — an SDK client below, a local model, a test double — is an `LLM`.

A client translates every failure of its backend (HTTP status, connection error,
the SDK's own timeout, an answer without text) into `LLMError` with the original
chained, so callers handle one exception type and can still see the cause. Deadlines
are the caller's business (``asyncio.wait_for``); clients never retry on their own
beyond what their ``max_retries`` says (default 0), because a retry loop inside the
client would outlive the caller's deadline (LLM use is opt-in and always falls back to
rules on error or deadline: docs/design-notes.md, Summaries and Memory extraction).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["LLM", "describe_error"]


@runtime_checkable
class LLM(Protocol):
    """A language model that answers one prompt with text.

    ``name`` identifies the provider and model (``"openai:gpt-4o-mini"``); it appears
    in summaries' ``method`` and in reports. ``complete`` returns the answer's text,
    possibly empty, and raises `LLMError` when the call fails.
    """

    name: str

    async def complete(self, prompt: str, *, system: str = "", max_tokens: int = 512) -> str: ...


def describe_error(exc: BaseException, limit: int = 200) -> str:
    """A one-line description of a backend error: its class, HTTP status if any, message.

    SDK messages can carry a whole response body; the description is cut to ``limit``
    characters so that it fits in a report or a summary's ``method``.
    """
    kind = type(exc).__name__
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        kind = f"{kind} (HTTP {status})"
    message = " ".join(str(exc).split())
    text = f"{kind}: {message}" if message else kind
    return text if len(text) <= limit else text[: limit - 1] + "…"
