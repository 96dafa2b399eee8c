"""Language models for summaries and memory extraction: one small protocol, two clients.

`LLM` is the contract (a ``name`` and ``async complete(prompt, system=, max_tokens=)``);
`OpenAICompatibleLLM` (OpenAI Chat Completions, or any server speaking it) and
`AnthropicLLM` (Anthropic Messages) implement it over the official SDKs, installed
with the ``sdk`` extra; `ResponsesCompactClient` asks OpenAI's ``/responses/compact``
to compact a conversation (`history.ProviderCompactor`). Every failure surfaces as `LLMError` with the SDK's error
chained; callers put their own deadline around the call and fall back to rules.
The clients (and the OpenAI-compatible embedder in `_embed`) build their SDK client
through one helper, `_client.sdk_client`.

This package sits low in the layering (docs/architecture.md): it imports only the error and
message modules, so history and memory can use it without cycles.
"""

from .._errors import LLMError
from ._anthropic import AnthropicLLM
from ._base import LLM, describe_error
from ._compact import ResponsesCompactClient
from ._openai import OpenAICompatibleLLM

__all__ = [
    "LLM",
    "AnthropicLLM",
    "LLMError",
    "OpenAICompatibleLLM",
    "ResponsesCompactClient",
    "describe_error",
]
