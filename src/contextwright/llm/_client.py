"""Setting up an SDK client, once for every client in this package.

The LLM clients (`OpenAICompatibleLLM`, `AnthropicLLM`) and the OpenAI-compatible
embedder each drive an official SDK, installed with the ``sdk`` extra and imported
only when a client is built. `sdk_client` does what they all need to build one:

* import the SDK, or raise `MissingDependencyError` naming the package, the extra
  and what needed it;
* take the key given, else the SDK's environment variable (``OPENAI_API_KEY``,
  ``ANTHROPIC_API_KEY``); with a ``base_url`` and no key anywhere, send a
  placeholder key: compatible servers rarely check it, but the SDK refuses to
  start without one;
* pass ``base_url``, ``timeout`` and ``max_retries`` (the callers default it to 0:
  the caller's deadline rules, and the SDK's retries with back-off would outlive
  it);
* turn the SDK's refusal to start (no key for the vendor's own API) into
  `ConfigError`.

`call_failed` is the other half they share: every SDK, transport and timeout error
of a call becomes one `LLMError` naming the client, with the original chained.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Literal

from .._errors import ConfigError, LLMError, MissingDependencyError
from ._base import describe_error

__all__ = ["PLACEHOLDER_KEY", "call_failed", "sdk_client"]

# Sent when a compatible server needs no key; the SDK insists on having one.
PLACEHOLDER_KEY = "not-needed"

Sdk = Literal["openai", "anthropic"]

# sdk -> (the key's environment variable, the vendor as messages name it, the SDK's
# base error class, other errors its constructor raises for a bad set-up)
_SDKS: dict[str, tuple[str, str, str, tuple[type[Exception], ...]]] = {
    "openai": ("OPENAI_API_KEY", "OpenAI", "OpenAIError", ()),
    "anthropic": ("ANTHROPIC_API_KEY", "Anthropic", "AnthropicError", (ValueError,)),
}


def sdk_client(
    sdk: Sdk,
    cls: str,
    purpose: str,
    *,
    api_key: str | None,
    base_url: str | None,
    timeout: float,
    max_retries: int,
) -> Any:
    """A new ``<sdk>.<cls>`` client (``cls`` e.g. ``"AsyncOpenAI"``, ``"OpenAI"``).

    ``purpose`` names the caller in the `MissingDependencyError` raised when the SDK
    is not installed ("the Anthropic LLM client"); a client the SDK refuses to build
    raises `ConfigError`.
    """
    env, vendor, base_error, more_errors = _SDKS[sdk]
    try:
        module = importlib.import_module(sdk)
    except ImportError:
        raise MissingDependencyError(sdk, "sdk", purpose) from None
    key = api_key or os.environ.get(env)
    if not key and base_url:
        key = PLACEHOLDER_KEY
    errors = (getattr(module, base_error), *more_errors)
    try:
        return getattr(module, cls)(
            api_key=key, base_url=base_url, timeout=timeout, max_retries=max_retries
        )
    except errors as exc:  # e.g. no key for the vendor's own API
        raise ConfigError(f"cannot set up the {vendor} client: {exc}") from exc


def call_failed(name: str, exc: BaseException) -> LLMError:
    """The `LLMError` for a failed call of the client ``name`` (raise it ``from exc``)."""
    return LLMError(f"{name}: {describe_error(exc)}")
