"""Reading a provider's reported usage: the input tokens it charged for a request.

`read_usage` takes what a provider returned about a request and says how many input
tokens it counted, whatever the shape:

* OpenAI Chat Completions — ``usage.prompt_tokens`` (cached tokens included;
  ``prompt_tokens_details`` says how many were read from the cache, and written);
* OpenAI Responses — ``usage.input_tokens`` (cached included;
  ``input_tokens_details.cached_tokens`` and ``cache_write_tokens``);
* Anthropic Messages — ``usage.input_tokens`` counts only the tokens after the last
  cache breakpoint: the request's input is ``input_tokens +
  cache_creation_input_tokens + cache_read_input_tokens``;
* LangChain's ``usage_metadata`` (``input_tokens`` already the whole input).

Each may be the SDK's object (attributes), a plain dict (JSON), or the whole
response (anything with a ``usage``). A value that is none of these raises
`InvalidMessageError` naming what is missing. No SDK is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .._errors import InvalidMessageError

__all__ = ["ProviderUsage", "UsageShape", "read_usage"]

UsageShape = Literal["openai", "responses", "anthropic", "unknown"]

_MISSING = object()


@dataclass(frozen=True, slots=True)
class ProviderUsage:
    """What a provider reported for one request.

    ``input_tokens`` is the whole input the provider counted (cached and cache-written
    tokens included, for every provider); ``cached_tokens`` of them were read from its
    prompt cache, ``cache_write_tokens`` were written to it. ``shape`` says
    which provider's usage object it was read from.
    """

    input_tokens: int
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int | None = None
    shape: UsageShape = "unknown"

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "cached_tokens": self.cached_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "output_tokens": self.output_tokens,
            "shape": self.shape,
        }


def _get(obj: Any, name: str) -> Any:
    """``obj[name]`` of a mapping, ``obj.name`` of an object; `_MISSING` if neither."""
    if isinstance(obj, Mapping):
        return obj.get(name, _MISSING)
    return getattr(obj, name, _MISSING)


def _count(obj: Any, name: str, where: str, *, required: bool = False) -> int:
    value = _get(obj, name)
    if value is _MISSING or value is None:
        if required:
            raise InvalidMessageError(f"{where}.{name}", "is missing")
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise InvalidMessageError(f"{where}.{name}", f"must be a number, got {value!r}")
    if value < 0:
        raise InvalidMessageError(f"{where}.{name}", f"must be >= 0, got {value!r}")
    return int(value)


def _has(obj: Any, name: str) -> bool:
    return _get(obj, name) not in (_MISSING, None)


def _cache(details: Any, where: str) -> tuple[int, int]:
    """(cached, cache-written) tokens of OpenAI's prompt or input token details."""
    if details in (_MISSING, None):
        return 0, 0
    return _count(details, "cached_tokens", where), _count(details, "cache_write_tokens", where)


def read_usage(usage: Any) -> ProviderUsage:
    """The input tokens a provider reported, from its usage object, dict or whole response."""
    if isinstance(usage, ProviderUsage):
        return usage
    if isinstance(usage, (str, bytes, int, float)) or usage is None:
        raise InvalidMessageError(
            "usage", f"must be a provider's usage object or dict, got {type(usage).__name__}"
        )
    where = "usage"
    inner = _get(usage, "usage")
    if inner is _MISSING:
        inner = _get(usage, "usage_metadata")  # a LangChain AIMessage
    if inner not in (_MISSING, None) and not _has(usage, "prompt_tokens"):
        usage, where = inner, "usage.usage"
    if _has(usage, "prompt_tokens"):  # OpenAI Chat Completions
        read, write = _cache(_get(usage, "prompt_tokens_details"), where)
        out = _get(usage, "completion_tokens")
        return ProviderUsage(
            _count(usage, "prompt_tokens", where, required=True), read, write,
            _count(usage, "completion_tokens", where) if out is not _MISSING else None, "openai",
        )  # fmt: skip
    if not _has(usage, "input_tokens"):
        raise InvalidMessageError(
            where, "has neither prompt_tokens (OpenAI Chat) nor input_tokens (Responses, Anthropic)"
        )
    base = _count(usage, "input_tokens", where, required=True)
    out_value = _get(usage, "output_tokens")
    output = _count(usage, "output_tokens", where) if out_value not in (_MISSING, None) else None
    if (
        _get(usage, "cache_creation_input_tokens") is not _MISSING
        or _get(usage, "cache_read_input_tokens") is not _MISSING
    ):  # Anthropic: input_tokens is what came after the cache
        write = _count(usage, "cache_creation_input_tokens", where)
        read = _count(usage, "cache_read_input_tokens", where)
        return ProviderUsage(base + write + read, read, write, output, "anthropic")
    details = _get(usage, "input_tokens_details")
    if details not in (_MISSING, None):  # OpenAI Responses
        return ProviderUsage(base, *_cache(details, where), output, "responses")
    details = _get(usage, "input_token_details")  # LangChain: input_tokens is the whole input
    if details not in (_MISSING, None):
        read = _count(details, "cache_read", where)
        write = _count(details, "cache_creation", where)
        return ProviderUsage(base, read, write, output, "unknown")
    return ProviderUsage(base, output_tokens=output)
