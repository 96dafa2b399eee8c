"""An `LLM` over the OpenAI Chat Completions API, or any server that speaks it.

`OpenAICompatibleLLM` drives the official ``openai`` SDK's ``AsyncOpenAI`` client
(``chat.completions.create``). With ``base_url`` it talks to any OpenAI-compatible
server — vLLM, llama.cpp, Ollama, LM Studio, a gateway — which is why it is named for
the protocol rather than the vendor.

The SDK is an optional extra (``contextwright[sdk]``) and is imported only when a
client is built (by `_client.sdk_client`, shared with the other SDK clients), so
importing contextwright never needs it.

Choices that differ from the SDK's defaults, and why:

* ``max_retries=0``: the SDK retries twice with back-off by default; a summary has a
  deadline of a few seconds, and a retry loop inside the client would outlive it.
  The caller's deadline rules.
* The answer length is sent as ``max_completion_tokens`` to OpenAI itself (its
  reasoning models reject ``max_tokens``) and as ``max_tokens`` to other servers
  (older compatible servers only know that one); ``token_param`` overrides.
* Local servers rarely check the key, but the SDK refuses to start without one: with
  a ``base_url`` and no key anywhere, a placeholder key is sent.
"""

from __future__ import annotations

from typing import Any, Literal

from .._errors import ConfigError, LLMError
from ._client import call_failed, sdk_client

__all__ = ["OpenAICompatibleLLM"]


class OpenAICompatibleLLM:
    """A chat-completions model: ``await llm.complete("Summarise …", system="…")``.

    ``model`` is the server's model name. ``client`` may be a ready ``AsyncOpenAI``
    (then ``base_url``, ``api_key`` and ``timeout`` are ignored and its own retry
    setting applies). ``timeout`` is the SDK's per-request timeout in seconds;
    ``temperature=None`` leaves the server's default (some reasoning models accept
    no other).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 10.0,
        client: Any = None,
        temperature: float | None = 0.0,
        max_retries: int = 0,
        token_param: Literal["max_tokens", "max_completion_tokens"] | None = None,
    ) -> None:
        if not model:
            raise ConfigError("OpenAICompatibleLLM needs a model name")
        self.model = model
        self.name = f"openai:{model}"
        self.temperature = temperature
        self.token_param = token_param or ("max_tokens" if base_url else "max_completion_tokens")
        self._owns_client = client is None
        if client is None:
            client = sdk_client(
                "openai", "AsyncOpenAI", "the OpenAI-compatible LLM client",
                api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries,
            )  # fmt: skip
        self._client = client

    async def complete(self, prompt: str, *, system: str = "", max_tokens: int = 512) -> str:
        """The model's answer to ``prompt`` (``""`` if it gave no text); `LLMError` on failure."""
        messages: list[dict[str, str]] = []
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": prompt})
        options: dict[str, Any] = {self.token_param: max_tokens}
        if self.temperature is not None:
            options["temperature"] = self.temperature
        try:
            response = await self._client.chat.completions.create(
                model=self.model, messages=messages, **options
            )
        except Exception as exc:  # every SDK, transport and timeout error, translated
            raise call_failed(self.name, exc) from exc
        choices = getattr(response, "choices", None)
        if not choices:
            raise LLMError(f"{self.name}: the answer has no choices")
        message = choices[0].message
        refusal = getattr(message, "refusal", None)
        if refusal and not message.content:
            raise LLMError(f"{self.name}: the model refused: {refusal}")
        content = message.content
        return content if isinstance(content, str) else ""

    async def aclose(self) -> None:
        """Close the HTTP connections of a client this object created."""
        if self._owns_client:
            await self._client.close()

    def __repr__(self) -> str:
        return f"OpenAICompatibleLLM({self.model!r})"
