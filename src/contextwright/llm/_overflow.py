"""Recognising a provider's context-length error, and what it says about the request.

`read_overflow` takes what a call to a provider raised or returned and answers None
when it is not a context-length error, else a `ContextOverflow`: the provider's
limit for the input and the input it counted, as far as the error says.

Recognised:

* OpenAI (Chat Completions, Responses and servers speaking them): code
  ``context_length_exceeded``, or the message "This model's maximum context length
  is N tokens. However, your messages resulted in M tokens" (also "you requested T
  tokens (M in the messages, C in the completion)", and the older "M in your
  prompt; C for the completion"). The Responses API's "Your input exceeds the
  context window of this model" carries no numbers.
* Anthropic: ``invalid_request_error`` "prompt is too long: M tokens > N maximum",
  and "input length and `max_tokens` exceed context limit: M + C > N".

The error may be the SDK's exception (``openai.BadRequestError``,
``anthropic.BadRequestError``: read through their ``body``, ``code`` and message,
so no SDK is imported), one that wraps it (`LLMError`, anything with a
``__cause__``), the error body as a dict (with or without its ``"error"``
envelope), or its text (the message, or the body as JSON).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["ContextOverflow", "read_overflow"]

_OPENAI_LIMIT = re.compile(r"maximum context length is ([\d,]+) tokens", re.I)
_OPENAI_RESULTED = re.compile(r"(?:messages|prompt) resulted in ([\d,]+) tokens", re.I)
_OPENAI_REQUESTED = re.compile(
    r"requested ([\d,]+) tokens \(([\d,]+) in (?:the messages|your prompt)[,;] "
    r"([\d,]+) (?:in|for) the completion\)",
    re.I,
)
_OPENAI_NO_NUMBERS = re.compile(r"input exceeds the context window", re.I)
_ANTHROPIC_TOO_LONG = re.compile(r"prompt is too long:\s*([\d,]+) tokens\s*>\s*([\d,]+)", re.I)
_ANTHROPIC_WITH_OUTPUT = re.compile(
    r"input length and `?max_tokens`? exceed context limit:\s*([\d,]+)\s*\+\s*([\d,]+)\s*>\s*([\d,]+)",
    re.I,
)


@dataclass(frozen=True, slots=True)
class ContextOverflow:
    """A provider refused a request as too long for the model's context.

    ``limit`` is the model's context length as the error gives it; ``reported`` the
    input tokens the provider counted; ``output`` the tokens reserved for the answer
    that the provider counted against the same limit (``max_tokens``), when it says.
    ``input_limit`` is what the input may take: ``limit - output``. Any of them is
    None when the error does not say (OpenAI Responses gives no numbers).
    """

    provider: Literal["openai", "anthropic"]
    message: str
    limit: int | None = None
    reported: int | None = None
    output: int | None = None

    @property
    def input_limit(self) -> int | None:
        if self.limit is None:
            return None
        return max(1, self.limit - (self.output or 0))

    def to_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "limit": self.limit,
            "reported": self.reported,
            "output": self.output,
            "message": self.message[:300],
        }


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _from_text(text: str, code: str | None) -> ContextOverflow | None:
    message = " ".join(text.split())
    if m := _ANTHROPIC_TOO_LONG.search(message):
        return ContextOverflow("anthropic", message, _int(m[2]), _int(m[1]))
    if m := _ANTHROPIC_WITH_OUTPUT.search(message):
        return ContextOverflow("anthropic", message, _int(m[3]), _int(m[1]), _int(m[2]))
    limit = _OPENAI_LIMIT.search(message)
    if limit is not None:
        if m := _OPENAI_REQUESTED.search(message):
            return ContextOverflow("openai", message, _int(limit[1]), _int(m[2]), _int(m[3]))
        got = _OPENAI_RESULTED.search(message)
        return ContextOverflow("openai", message, _int(limit[1]), _int(got[1]) if got else None)
    if code == "context_length_exceeded" or _OPENAI_NO_NUMBERS.search(message):
        return ContextOverflow("openai", message)
    return None


def _from_body(body: Mapping[str, Any]) -> ContextOverflow | None:
    error = body.get("error", body)
    if not isinstance(error, Mapping):
        return None
    message = error.get("message")
    code = error.get("code")
    return _from_text(
        message if isinstance(message, str) else "", code if isinstance(code, str) else None
    )


def read_overflow(error: Any) -> ContextOverflow | None:
    """The context-length error in ``error`` (exception, body dict or text), else None."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, ContextOverflow):
            return error
        if isinstance(error, Mapping):
            return _from_body(error)
        if isinstance(error, (bytes, bytearray)):
            error = error.decode("utf-8", "replace")
        if isinstance(error, str):
            text = error.strip()
            if text.startswith("{"):
                try:
                    parsed = json.loads(text)
                except ValueError:
                    parsed = None
                if isinstance(parsed, Mapping):
                    return _from_body(parsed)
            return _from_text(text, None)
        if isinstance(error, BaseException):
            body = getattr(error, "body", None)
            found = _from_body(body) if isinstance(body, Mapping) else None
            if found is None:
                code = getattr(error, "code", None)
                said = getattr(error, "message", None)
                found = _from_text(
                    said if isinstance(said, str) else str(error),
                    code if isinstance(code, str) else None,
                )
            if found is not None:
                return found
            error = error.__cause__  # an error raised "from" the SDK's (`LLMError`)
            continue
        return None
    return None
