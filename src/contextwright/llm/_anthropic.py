"""An `LLM` over the Anthropic Messages API.

`AnthropicLLM` drives the official ``anthropic`` SDK's ``AsyncAnthropic`` client
(``messages.create``) and returns the text blocks of the answer joined together. The
SDK is an optional extra (``contextwright[sdk]``), imported only when a client is
built.

As with the OpenAI client, ``max_retries=0`` by default: the caller holds the
deadline, and the SDK's own retries with back-off would outlive it. With a
``base_url`` (a proxy or a compatible server) and no key anywhere, a placeholder key
is sent, since such servers often do not check it and the SDK cannot send a request
without credentials.
"""

from __future__ import annotations

import os
from typing import Any

from .._errors import ConfigError, LLMError, MissingDependencyError
from ._base import describe_error

__all__ = ["AnthropicLLM"]

PLACEHOLDER_KEY = "not-needed"


class AnthropicLLM:
    """A Claude model: ``await llm.complete("Summarise …", system="…")``.

    ``client`` may be a ready ``AsyncAnthropic`` (then ``base_url``, ``api_key`` and
    ``timeout`` are ignored). ``timeout`` is the SDK's per-request timeout in
    seconds. There is no ``temperature``: the Messages API of SDK 2.x no longer takes
    sampling settings.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 10.0,
        client: Any = None,
        max_retries: int = 0,
    ) -> None:
        if not model:
            raise ConfigError("AnthropicLLM needs a model name")
        self.model = model
        self.name = f"anthropic:{model}"
        self._owns_client = client is None
        if client is None:
            try:
                import anthropic
            except ImportError:
                raise MissingDependencyError(
                    "anthropic", "sdk", "the Anthropic LLM client"
                ) from None
            key = api_key or os.environ.get("ANTHROPIC_API_KEY")
            if not key and base_url:
                key = PLACEHOLDER_KEY
            try:
                client = anthropic.AsyncAnthropic(
                    api_key=key,
                    base_url=base_url,
                    timeout=timeout,
                    max_retries=max_retries,
                )
            except (anthropic.AnthropicError, ValueError) as exc:
                raise ConfigError(f"cannot set up the Anthropic client: {exc}") from exc
        self._client = client

    async def complete(self, prompt: str, *, system: str = "", max_tokens: int = 512) -> str:
        """The model's answer to ``prompt`` (``""`` if it gave no text); `LLMError` on failure."""
        options: dict[str, Any] = {}
        if system:
            options["system"] = system
        try:
            response = await self._client.messages.create(
                model=self.model,
                max_tokens=max_tokens,
                messages=[{"role": "user", "content": prompt}],
                **options,
            )
        except Exception as exc:  # every SDK, transport and timeout error, translated
            raise LLMError(f"{self.name}: {describe_error(exc)}") from exc
        if getattr(response, "stop_reason", None) == "refusal":
            raise LLMError(f"{self.name}: the model refused")
        blocks = getattr(response, "content", None) or []
        texts = [b.text for b in blocks if getattr(b, "type", None) == "text"]
        return "".join(t for t in texts if isinstance(t, str))

    async def aclose(self) -> None:
        """Close the HTTP connections of a client this object created."""
        if self._owns_client:
            await self._client.close()

    def __repr__(self) -> str:
        return f"AnthropicLLM({self.model!r})"
