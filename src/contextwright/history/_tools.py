"""Tool results: compressed for the prompt, the full output kept where the model can read it.

Tool outputs are the biggest thing in most agent contexts (seed 002 §6: list
truncation, large-text offload with a pointer, structure kept). `ToolResultCompressor`
decides, per tool, how a result too large for the prompt is shown:

* ``json_list`` — a JSON list (or the largest list inside a JSON object) keeps its
  first N items, followed by how many were left out;
* ``json_skeleton`` — any JSON keeps its shape: keys, types, list lengths, and short
  scalar values;
* ``head_tail`` — text keeps its head and tail, where errors and totals usually are;
* ``keep`` — never compressed (the read-back tool's own output uses this, so a page
  that was read back is never offloaded again);
* ``auto`` — the first of the above that fits.

When a result is larger than ``offload_above`` tokens the full text is *offloaded*:
the `Compression` carries it with a key, the caller writes it to working memory
(the store's ``put_working``, with a TTL), and the prompt shows the compressed view
plus a pointer naming the read-back tool (`readback_tool`) the model can call to
page through the original. The compressor itself does no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .._errors import ConfigError
from .._tokens import TokenCounter, truncate_to_tokens

__all__ = [
    "READBACK_TOOL",
    "Compression",
    "ToolPolicy",
    "ToolResultCompressor",
    "readback_page",
    "readback_tool",
]

Strategy = Literal["auto", "json_list", "json_skeleton", "head_tail", "keep"]
READBACK_TOOL = "read_tool_result"


@dataclass(frozen=True, slots=True)
class ToolPolicy:
    """How results of one tool are shown when they are too large.

    ``max_tokens``: results at or under this are left alone. ``list_items``: items kept
    by ``json_list``. ``offload_above``: results over this many tokens are offloaded
    (None: never). ``ttl``: seconds the offloaded original stays readable.
    """

    strategy: Strategy = "auto"
    max_tokens: int = 500
    list_items: int = 5
    offload_above: int | None = 2000
    ttl: float = 24 * 3600.0

    def __post_init__(self) -> None:
        if self.strategy not in ("auto", "json_list", "json_skeleton", "head_tail", "keep"):
            raise ConfigError(f"unknown tool result strategy {self.strategy!r}")
        if self.max_tokens < 16:
            raise ConfigError(f"ToolPolicy.max_tokens must be at least 16, got {self.max_tokens}")
        if self.list_items < 0:
            raise ConfigError("ToolPolicy.list_items must be >= 0")
        if self.offload_above is not None and self.offload_above < self.max_tokens:
            raise ConfigError("ToolPolicy.offload_above must be >= max_tokens (or None)")


@dataclass(frozen=True, slots=True)
class Compression:
    """The prompt view of one result, and what to offload (key, original) if anything."""

    text: str
    strategy: str
    tokens_before: int
    tokens_after: int
    offload_key: str | None = None
    original: str | None = field(default=None, repr=False)

    @property
    def changed(self) -> bool:
        return self.strategy != "none"


def _largest_list(value: Any, path: str = "") -> tuple[str, list[Any]] | None:
    """The longest list in a JSON value (depth-first), with its path."""
    best: tuple[str, list[Any]] | None = None
    if isinstance(value, list):
        best = (path, value)
        children = enumerate(value[:50])
        items: Any = ((f"{path}[{i}]", v) for i, v in children)
    elif isinstance(value, dict):
        items = ((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
    else:
        return None
    for sub_path, sub in items:
        found = _largest_list(sub, sub_path)
        if found is not None and (best is None or len(found[1]) > len(best[1])):
            best = found
    return best


def _cut_list(value: Any, keep: int) -> tuple[Any, int] | None:
    """``value`` with its largest list cut to ``keep`` items, and how many were dropped."""
    found = _largest_list(value)
    if found is None or len(found[1]) <= keep:
        return None
    target = found[1]
    dropped = len(target) - keep
    marker = f"… {dropped} more item(s) of {len(target)} not shown"

    def rebuild(v: Any) -> Any:
        if v is target:
            return [*(rebuild(x) for x in v[:keep]), marker]
        if isinstance(v, list):
            return [rebuild(x) for x in v]
        if isinstance(v, dict):
            return {k: rebuild(x) for k, x in v.items()}
        return v

    return rebuild(value), dropped


def _skeleton(value: Any, depth: int = 0) -> Any:
    """The shape of a JSON value: keys, types, list lengths, short scalars."""
    if isinstance(value, dict):
        if depth >= 4:
            return f"{{… {len(value)} keys}}"
        return {k: _skeleton(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        if not value:
            return []
        return [_skeleton(value[0], depth + 1), f"… ×{len(value)}"]
    if isinstance(value, str):
        return value if len(value) <= 40 else f"str({len(value)} chars): {value[:30]}…"
    return value


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class ToolResultCompressor:
    """Shows large tool results compactly, per tool; see the module docstring."""

    def __init__(
        self,
        counter: TokenCounter,
        *,
        default: ToolPolicy | None = None,
        policies: Mapping[str, ToolPolicy] | None = None,
        readback_name: str = READBACK_TOOL,
    ) -> None:
        self.counter = counter
        self.default = default or ToolPolicy()
        self.policies: dict[str, ToolPolicy] = dict(policies or {})
        # The read-back tool's pages are never compressed or offloaded again.
        self.policies.setdefault(readback_name, ToolPolicy(strategy="keep", offload_above=None))
        self.readback_name = readback_name

    def policy(self, tool: str | None) -> ToolPolicy:
        return self.policies.get(tool or "", self.default)

    def compress(self, content: str, *, tool: str | None = None, key: str = "") -> Compression:
        """The view of ``content`` (a result of ``tool``) for the prompt.

        ``key`` names the offloaded original (e.g. ``tool:<call id>``); without it
        nothing is offloaded.
        """
        policy = self.policy(tool)
        before = self.counter.count(content)
        if policy.strategy == "keep" or before <= policy.max_tokens:
            return Compression(content, "none", before, before)
        offload = bool(key) and policy.offload_above is not None and before > policy.offload_above
        pointer = self._pointer(key, before) if offload else ""
        room = policy.max_tokens - (self.counter.count(pointer) + 1 if pointer else 0)
        text, strategy = self._view(content, policy, max(room, 8))
        if pointer:
            text = f"{text}\n{pointer}"
        after = self.counter.count(text)
        return Compression(
            text, strategy, before, after, key if offload else None, content if offload else None
        )

    def _pointer(self, key: str, tokens: int) -> str:
        return (
            f"[full result ({tokens} tokens) saved as {key!r}: "
            f"call {self.readback_name}(key={json.dumps(key)}, page=1) to read it]"
        )

    def _view(self, content: str, policy: ToolPolicy, room: int) -> tuple[str, str]:
        parsed: Any = None
        is_json = False
        if policy.strategy in ("auto", "json_list", "json_skeleton"):
            stripped = content.lstrip()
            if stripped[:1] in ("[", "{"):
                try:
                    parsed = json.loads(content)
                    is_json = True
                except ValueError:
                    is_json = False
        count = self.counter.count
        if is_json and policy.strategy in ("auto", "json_list"):
            keep = policy.list_items
            while keep >= 0:
                cut = _cut_list(parsed, keep)
                if cut is None:
                    break
                text = _dumps(cut[0])
                if count(text) <= room:
                    return text, "json_list"
                keep = keep - 1 if keep > 1 else -1
        if is_json and policy.strategy in ("auto", "json_skeleton", "json_list"):
            text = _dumps(_skeleton(parsed))
            if count(text) <= room:
                return text, "json_skeleton"
        marker = "\n…[{omitted} characters of this tool result not shown]…\n"
        return truncate_to_tokens(
            content, room, self.counter, keep="both", marker=marker
        ), "head_tail"


def readback_tool(
    provider: Literal["openai", "anthropic", "responses"] = "openai",
) -> dict[str, Any]:
    """The definition of the read-back tool, in a provider's tool format."""
    description = (
        "Read the full output of an earlier tool call that was shortened in the conversation. "
        "Pass the key shown in the shortened result; pages are numbered from 1."
    )
    schema = {
        "type": "object",
        "properties": {
            "key": {"type": "string", "description": "the key given in the shortened result"},
            "page": {"type": "integer", "minimum": 1, "description": "page number, from 1"},
        },
        "required": ["key"],
        "additionalProperties": False,
    }
    if provider == "anthropic":
        return {"name": READBACK_TOOL, "description": description, "input_schema": schema}
    if provider == "responses":
        return {
            "type": "function",
            "name": READBACK_TOOL,
            "description": description,
            "parameters": schema,
        }
    if provider == "openai":
        return {
            "type": "function",
            "function": {"name": READBACK_TOOL, "description": description, "parameters": schema},
        }
    raise ConfigError(f"unknown provider {provider!r}")


def readback_page(
    original: str, page: int, counter: TokenCounter, *, page_tokens: int = 1500
) -> str:
    """Page ``page`` (from 1) of an offloaded result, about ``page_tokens`` tokens each.

    Pages are cut on character boundaries that never split a character; the page
    says which page it is and how many there are, so the model knows when to stop.
    """
    if page < 1:
        raise ConfigError(f"page must be >= 1, got {page}")
    pages: list[str] = []
    rest = original
    while rest:
        head = truncate_to_tokens(rest, page_tokens, counter, marker="")
        if not head:  # a single character larger than a page: take it anyway
            head = rest[:1]
        pages.append(head)
        rest = rest[len(head) :]
    if not pages:
        pages = [""]
    if page > len(pages):
        return f"[page {page} does not exist: the result has {len(pages)} page(s)]"
    return f"[page {page} of {len(pages)}]\n{pages[page - 1]}"
