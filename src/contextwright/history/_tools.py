"""Tool results: compressed for the prompt, the full output kept where the model can read it.

Tool outputs are the biggest thing in most agent contexts (docs/design-notes.md,
History window and long content: list truncation, large-text offload with a pointer,
structure kept). `ToolResultCompressor`
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
the `Compression` carries it with a key, the caller makes it readable from working
memory under that key for the policy's TTL, and the prompt shows the compressed
view plus a pointer naming the read-back tool (`readback_tool`) the model can call
to page through the original. (`Conversations` does not copy the original: with an
`SQLiteStore` the key refers to the stored message, which keeps it verbatim; see
``SQLiteStore.append(..., readback=)``.) The compressor itself does no I/O.

**Counting only what enters the prompt.** Counting a whole 8 KB result exactly
just to learn that it is too big was most of the cost of appending tool results
(a 10,000-message import spent 1.7 s of 3.9 s in the tokenizer, mostly on
originals). The view that enters the prompt is always counted exactly — stored
counts and the prompt budget depend on it — but the original only when the
answer could change whether it is kept:

* with a byte-level BPE counter (tiktoken) a text of at most ``max_tokens`` UTF-8
  bytes is kept without doubt: such a tokenizer starts from one token per byte
  and only ever merges, so it never makes more tokens than bytes;
* a text of more than ``2 * SAMPLE_CHARS`` characters is first *estimated*: its
  first `SAMPLE_CHARS` characters are counted and the count scaled to its length
  (within 5 % on the benchmark's JSON). It is too big without counting it if the
  estimate is over twice ``max_tokens`` (its head would have to be twice as dense
  as the whole for it to fit) or it has more than `SURE_CHARS_PER_TOKEN`
  characters per token of ``max_tokens`` (English runs about 4 characters a
  token, JSON 2.4, Chinese under 2: docs/design-notes.md, History window and long
  content);
* anything else is counted exactly, so a result is never kept unless its exact
  count fits.

A result that was not counted keeps its estimate: it decides ``offload_above``
(unless it is within `EXACT_NEAR` of it: then the result is counted after all)
and is reported as one (``Compression.estimated``; the pointer says "about N
tokens").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .._errors import ConfigError
from ..tokens._count import CachedCounter, TokenCounter
from ..tokens._exact import TiktokenCounter
from ..tokens._truncate import _largest_fitting, _safe_cut, truncate_to_tokens

__all__ = [
    "EXACT_NEAR",
    "READBACK_TOOL",
    "SAMPLE_CHARS",
    "SURE_CHARS_PER_TOKEN",
    "Compression",
    "ToolPolicy",
    "ToolResultCompressor",
    "readback_page",
    "readback_tool",
]

Strategy = Literal["auto", "json_list", "json_skeleton", "head_tail", "keep"]
READBACK_TOOL = "read_tool_result"
# A result longer than this many characters per token of its max_tokens is too big
# without counting it (see the module docstring).
SURE_CHARS_PER_TOKEN = 6
# Characters counted to estimate the size of a result that is not counted whole.
SAMPLE_CHARS = 512
# An estimate this close to offload_above (as a fraction of it) is not trusted.
EXACT_NEAR = 0.03
# A head-and-tail view never looks further into the text than this many characters
# per token of room: no tokenizer averages more, so the cut is found without
# counting the whole text (a text sparser than that gets a shorter view, never a
# longer one).
_MAX_CHARS_PER_TOKEN = 32


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
    """The prompt view of one result, and what to offload (key, original) if anything.

    ``tokens_after`` is the exact count of ``text``; ``tokens_before`` is exact
    unless ``estimated`` (a large result is sized from a counted sample of it).
    """

    text: str
    strategy: str
    tokens_before: int
    tokens_after: int
    offload_key: str | None = None
    original: str | None = field(default=None, repr=False)
    estimated: bool = False

    @property
    def changed(self) -> bool:
        return self.strategy != "none"


_CONTAINERS = frozenset((list, dict))


def _largest_list(value: Any) -> tuple[list[Any], tuple[Any, ...]] | None:
    """The longest list in a JSON value (the first depth-first on a tie) and its path.

    Only containers are visited, and only the first 50 items of a list: the rows
    of a large result are alike, so the first ones say where its big lists are.
    The path (keys and indexes from the top) is built for the winner only.
    """
    best: list[Any] | None = None
    best_path: tuple[Any, ...] = ()
    path: list[Any] = []

    def walk(v: Any) -> None:
        nonlocal best, best_path
        if type(v) is list:
            if best is None or len(v) > len(best):
                best, best_path = v, tuple(path)
            head = v[:50]
            # most rows hold only scalars: one C-level check skips them
            if _CONTAINERS.isdisjoint(map(type, head)):
                return
            children: Any = enumerate(head)
        else:
            if _CONTAINERS.isdisjoint(map(type, v.values())):
                return
            children = v.items()
        for k, x in children:
            if type(x) is list or type(x) is dict:
                path.append(k)
                walk(x)
                path.pop()

    if type(value) is list or type(value) is dict:
        walk(value)
    return None if best is None else (best, best_path)


def _cut_list(value: Any, path: tuple[Any, ...], keep: int) -> Any:
    """``value`` with the list at ``path`` cut to ``keep`` items and a note.

    Only the containers on the path are copied; everything else is shared.
    """
    if not path:
        dropped = len(value) - keep
        return [*value[:keep], f"… {dropped} more item(s) of {len(value)} not shown"]
    copy: Any = list(value) if type(value) is list else dict(value)
    copy[path[0]] = _cut_list(value[path[0]], path[1:], keep)
    return copy


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


_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _at_most_one_token_per_byte(counter: TokenCounter) -> bool:
    """Whether ``counter`` never counts more tokens than a text has UTF-8 bytes.

    True of byte-level BPE (tiktoken): it starts from one token per byte and only
    merges. Other counters (the heuristic, Hugging Face tokenizers that add a
    prefix token) make no such promise, and their results are counted.
    """
    while isinstance(counter, CachedCounter):
        counter = counter.inner
    return isinstance(counter, TiktokenCounter)


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
        self._bytes_bound = _at_most_one_token_per_byte(counter)

    def policy(self, tool: str | None) -> ToolPolicy:
        return self.policies.get(tool or "", self.default)

    def compress(self, content: str, *, tool: str | None = None, key: str = "") -> Compression:
        """The view of ``content`` (a result of ``tool``) for the prompt.

        ``key`` names the offloaded original (e.g. ``tool:<call id>``); without it
        nothing is offloaded. A result is kept as it is only when its exact count
        fits ``max_tokens`` (or its UTF-8 size does, for a byte-level BPE counter).
        """
        policy = self.policy(tool)
        limit = policy.max_tokens
        count = self.counter.count
        if policy.strategy == "keep" or self._at_most(content, limit):
            tokens = count(content)
            return Compression(content, "none", tokens, tokens)
        above = policy.offload_above if key else None
        before, exact = self._size(content, limit, above)
        if exact and before <= limit:
            return Compression(content, "none", before, before)
        offload = above is not None and before > above
        pointer = self._pointer(key, before, exact) if offload else ""
        if pointer and count(pointer) + 1 + 8 > limit:
            # no room beside the pointer: the view gets 8 tokens and the result
            # goes over max_tokens, rather than losing the way to the original
            text, strategy, _ = self._view(content, policy, 8, before)
            text = f"{text}\n{pointer}"
            after = count(text)
        else:
            suffix = f"\n{pointer}" if pointer else ""
            text, strategy, after = self._view(content, policy, limit, before, suffix)
        return Compression(
            text, strategy, before, after, key if offload else None,
            content if offload else None, not exact,
        )  # fmt: skip

    def _size(self, content: str, limit: int, above: int | None) -> tuple[int, bool]:
        """(tokens, exact): the count, or an estimate for a result surely over ``limit``."""
        n = len(content)
        if n > 2 * SAMPLE_CHARS:
            estimate = self.counter.count(content[:SAMPLE_CHARS]) * n / SAMPLE_CHARS
            sure = n > SURE_CHARS_PER_TOKEN * limit or estimate > 2 * limit
            if sure and (above is None or abs(estimate - above) > EXACT_NEAR * above):
                return max(limit + 1, int(round(estimate, -1))), False
        return self.counter.count(content), True

    def _at_most(self, content: str, tokens: int) -> bool:
        """Whether ``content`` has at most ``tokens`` tokens, known without counting.

        Only a byte-level BPE counter can say: at most as many tokens as UTF-8 bytes.
        """
        return (
            self._bytes_bound
            and len(content) <= tokens
            and len(content.encode("utf-8", "surrogatepass")) <= tokens
        )

    def _pointer(self, key: str, tokens: int, exact: bool = True) -> str:
        size = f"{tokens} tokens" if exact else f"about {tokens} tokens"
        return (
            f"[full result ({size}) saved as {key!r}: "
            f"call {self.readback_name}(key={json.dumps(key)}, page=1) to read it]"
        )

    def _view(
        self, content: str, policy: ToolPolicy, room: int, tokens: int, suffix: str = ""
    ) -> tuple[str, str, int]:
        """(view + ``suffix``, strategy, its count): the first view that fits ``room`` with it.

        Each candidate is counted once, with the suffix (the pointer), so the count
        that decides it fits is the exact count of the text returned.
        """
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
            found = _largest_list(parsed)
            keep = policy.list_items
            while found is not None and keep >= 0 and len(found[0]) > keep:
                text = _dumps(_cut_list(parsed, found[1], keep)) + suffix
                n = count(text)
                if n <= room:
                    return text, "json_list", n
                keep = keep - 1 if keep > 1 else -1
        if is_json and policy.strategy in ("auto", "json_skeleton", "json_list"):
            text = _dumps(_skeleton(parsed)) + suffix
            n = count(text)
            if n <= room:
                return text, "json_skeleton", n
        text = self._head_tail(content, room, tokens, suffix)
        return text, "head_tail", count(text)

    def _head_tail(self, text: str, room: int, tokens: int, suffix: str = "") -> str:
        """The head and tail of ``text`` around a note of what was left out, then ``suffix``.

        `truncate_to_tokens` with ``keep="both"`` (the whole, suffix included,
        within ``room``), except that the text is never counted whole: ``tokens``
        (its size, exact or estimated) only guides the first guess, and the cut is
        searched among the first ``room * _MAX_CHARS_PER_TOKEN`` characters.
        """
        marker = "\n…[{omitted} characters of this tool result not shown]…\n"
        count = self.counter.count
        n = len(text)

        def build(k: int) -> str:
            head = _safe_cut(text, (k + 1) // 2)
            tail_start = _safe_cut(text, n - k // 2) if k // 2 else n
            if not marker:
                return text[:head] + text[tail_start:] + suffix
            cut = marker.format(omitted=tail_start - head)
            return text[:head] + cut + text[tail_start:] + suffix

        if count(build(0)) > room:
            marker = ""
        top = min(n - 1, room * _MAX_CHARS_PER_TOKEN)
        guess = int(n * room / max(tokens, 1))
        return build(_largest_fitting(top, lambda k: count(build(k)) <= room, guess))


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
