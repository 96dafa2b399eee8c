"""`ResponsesCompactClient`: OpenAI's ``POST /v1/responses/compact``, through the official SDK.

The endpoint takes a Responses ``input`` item list (the conversation so far, a
previous compaction item included) and answers a ``response.compaction`` object
whose ``output`` is the window's user messages verbatim followed by one
``compaction`` item (``encrypted_content``: an opaque summary only OpenAI reads).
`ResponsesCompactClient.compact` sends the items and returns that output as plain
JSON dicts, exactly as the server sent them (read through the SDK's raw response:
its output-item models have no user messages, and re-dumping them would add
fields), for the history layer to parse into messages (`ProviderCompactor`).

The client is built like the other SDK clients here (`_client.sdk_client`:
``max_retries=0``, a placeholder key with a ``base_url``); it calls
``client.responses.with_raw_response.compact`` (an SDK without it is a `ConfigError`). Every failure — SDK, transport, timeout,
an answer without exactly one compaction item — is one `LLMError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._errors import ConfigError, LLMError
from ._client import call_failed, sdk_client

__all__ = ["ResponsesCompactClient"]


class ResponsesCompactClient:
    """Asks OpenAI to compact a Responses conversation: ``await c.compact(items)``.

    ``model`` is the Responses model whose compaction is wanted (the next request
    must use a compatible model). ``client`` may be a ready ``AsyncOpenAI`` (then
    ``base_url``, ``api_key`` and ``timeout`` are ignored). ``instructions`` go
    with every request (the system prompt the conversation runs under).
    """

    provider = "responses"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        client: Any = None,
        max_retries: int = 0,
        instructions: str | None = None,
    ) -> None:
        if not model:
            raise ConfigError("ResponsesCompactClient needs a model name")
        self.model = model
        self.name = f"responses-compact:{model}"
        self.instructions = instructions
        self._owns_client = client is None
        if client is None:
            client = sdk_client(
                "openai", "AsyncOpenAI", "the OpenAI Responses compaction client",
                api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries,
            )  # fmt: skip
        self._client = client

    async def compact(self, items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The compacted window for ``items``: user messages, then one ``compaction`` item."""
        body: dict[str, Any] = {"model": self.model, "input": [dict(i) for i in items]}
        if self.instructions:
            body["instructions"] = self.instructions
        compact = getattr(self._client.responses.with_raw_response, "compact", None)
        if compact is None:
            raise ConfigError(
                f"{self.name}: this openai SDK has no responses.compact; upgrade it "
                "(pip install -U 'contextwright[sdk]')"
            )
        try:
            raw = await compact(**body)  # the JSON as sent: the SDK's models fit no user items
            answer = raw.http_response.json()
            output = answer.get("output") if isinstance(answer, dict) else None
        except Exception as exc:  # every SDK, transport and timeout error, translated
            raise call_failed(self.name, exc) from exc
        if not isinstance(output, list) or not all(isinstance(i, dict) for i in output):
            raise LLMError(f"{self.name}: the answer has no output item list")
        found = [i for i in output if i.get("type") == "compaction"]
        if len(found) != 1 or not isinstance(found[0].get("encrypted_content"), str):
            raise LLMError(
                f"{self.name}: expected one compaction item with encrypted_content, "
                f"got {len(found)}"
            )
        return output

    async def aclose(self) -> None:
        """Close the HTTP connections of a client this object created."""
        if self._owns_client:
            await self._client.close()

    def __repr__(self) -> str:
        return f"ResponsesCompactClient({self.model!r})"
