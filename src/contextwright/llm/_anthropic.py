"""An `LLM` over the Anthropic Messages API.

`AnthropicLLM` drives the official ``anthropic`` SDK's ``AsyncAnthropic`` client
(``messages.create``) and returns the text blocks of the answer joined together. The
SDK is an optional extra (``contextwright[sdk]``), imported only when a client is
built (by `_client.sdk_client`, shared with the other SDK clients).

As with the OpenAI client, ``max_retries=0`` by default: the caller holds the
deadline, and the SDK's own retries with back-off would outlive it. With a
``base_url`` (a proxy or a compatible server) and no key anywhere, a placeholder key
is sent, since such servers often do not check it and the SDK cannot send a request
without credentials.
"""

from __future__ import annotations

from typing import Any

from .._errors import ConfigError, LLMError
from ._client import call_failed, sdk_client

__all__ = ["AnthropicLLM"]


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
            client = sdk_client(
                "anthropic", "AsyncAnthropic", "the Anthropic LLM client",
                api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries,
            )  # fmt: skip
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
            raise call_failed(self.name, exc) from exc
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
