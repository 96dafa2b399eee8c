"""Counting messages: the framing a provider's request format adds around each message, and a message's cost."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .._errors import ConfigError
from ..model._messages import Message
from ..model._parts import (
    ImagePart,
    Part,
    ProviderPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)
from ._count import TokenCounter
from ._payload import payload_tokens

__all__ = [
    "DEFAULT_OVERHEAD",
    "_DEFAULT_KEYS",
    "_DEFAULT_TAG",
    "_PROFILES",
    "_ROLE_COSTS",
    "_WIRE_ROLES",
    "MessageOverhead",
    "count_key",
    "count_message",
    "count_messages",
    "message_frame",
    "role_tokens",
]


# The wire names a neutral role can take: system messages go out as "system" or
# "developer" (OpenAI's ``system_role``), tool messages as "tool" (OpenAI Chat) or
# inside a user turn (Anthropic); a role costs the most of its names.
_WIRE_ROLES: dict[str, tuple[str, ...]] = {
    "system": ("system", "developer"),
    "developer": ("system", "developer"),
    "user": ("user",),
    "assistant": ("assistant",),
    "tool": ("tool", "user"),
}


# (counter name, role) -> tokens of the role's wire name: a constant per vocabulary,
# counted once per process rather than once per message.
_ROLE_COSTS: dict[tuple[str, str], int] = {}


def role_tokens(counter: TokenCounter, role: str) -> int:
    """Tokens of ``role``'s name on the wire (the most of its possible names)."""
    key = (counter.name, role)
    n = _ROLE_COSTS.get(key)
    if n is None:
        n = _ROLE_COSTS[key] = max(counter.count(w) for w in _WIRE_ROLES.get(role, (role,)))
    return n


@dataclass(frozen=True, slots=True)
class MessageOverhead:
    """Tokens a provider's request format adds around content.

    A message costs ``per_message`` plus the tokens of its role's name (when
    ``count_role``), ``per_name`` plus the name's tokens if it has one, and for
    each part: ``per_part`` plus the text of a text part; ``per_tool_call`` plus
    the call's id, function name and arguments; and for each tool result the
    framing of a message of its own (``per_message``, the role "tool") plus
    ``per_tool_result``, the call id and the content. ``image_tokens`` is charged
    per image whatever its size: 1,600 covers the largest image either OpenAI
    (high detail, 1,445) or Anthropic (about 1,600) charges for. A request adds
    ``reply_priming`` once. Thinking, provider parts and the native wire forms some
    parts carry cost ``per_part`` plus what `tokens._payload` charges their
    strings and media (it errs high: providers do not publish these costs).

    The profiles, by `for_provider` (see docs/architecture.md, "Token accounting"):

    * ``"openai"`` — OpenAI's published accounting for chat models (the cookbook
      "How to count tokens with tiktoken"): 3 tokens per message plus every
      string of it encoded, its role included, 1 more for a name, 3 to prime the
      reply. Each tool result is a ``tool`` message of its own. A tool call's
      framing is not published: 12 tokens beside its id, name and arguments
      (its ``type``, and the header OpenAI's format gives each call).
    * ``"responses"`` — the same accounting applied to each ``input`` item; a tool
      result is a ``function_call_output`` item, whose type name costs 2 more
      tokens than the role "tool".
    * ``"anthropic"`` — Anthropic publishes neither its tokenizer nor its framing
      (its ``count_tokens`` endpoint is the only exact count). The profile charges
      each turn as OpenAI does, each content block 3 more tokens, and reserves
      room for the user turn the renderer puts first when a window opens with an
      assistant turn (`adapters.FIRST_USER_TEXT`).

    `MessageOverhead()` (the default everywhere) is the most of each field across
    the three, so a context built with it fits its budget whichever provider it is
    rendered for. A profile for one provider leaves a few more tokens for content
    but holds that guarantee only for its own provider.
    """

    per_message: int = 3
    per_name: int = 1
    per_tool_call: int = 12
    per_tool_result: int = 3
    image_tokens: int = 1600
    reply_priming: int = 3 + 24
    count_role: bool = True
    per_part: int = 3

    def covers(self, provider: str) -> bool:
        """Whether this overhead charges at least what ``provider``'s profile does."""
        other = MessageOverhead.for_provider(provider)
        return all(getattr(self, f) >= getattr(other, f) for f in self.__dataclass_fields__)

    @classmethod
    def for_provider(cls, provider: str) -> MessageOverhead:
        """The profile of ``"openai"``, ``"responses"`` or ``"anthropic"``; ``"any"`` is the default."""
        try:
            return _PROFILES[provider]
        except (KeyError, TypeError):
            raise ConfigError(
                f"overhead: unknown provider {provider!r}; expected one of {', '.join(_PROFILES)}"
            ) from None


DEFAULT_OVERHEAD = MessageOverhead()


_PROFILES: dict[str, MessageOverhead] = {
    "any": DEFAULT_OVERHEAD,
    # per_part 1: several texts of one message (or tool result) are joined by a newline
    "openai": MessageOverhead(per_tool_result=0, reply_priming=3, per_part=1),
    "responses": MessageOverhead(per_tool_result=2, reply_priming=3, per_part=1),
    # 24 = a turn (3 + "user") and a block (3) around FIRST_USER_TEXT (11-12 tokens
    # in cl100k_base and o200k_base), with room to spare for other vocabularies.
    "anthropic": MessageOverhead(reply_priming=3 + 24),
}


# Stored counts and the counts cached on messages are labelled with this beside
# the counter's name, so counts made under an earlier default are made again.
_DEFAULT_TAG = "+m2"


_DEFAULT_KEYS: dict[str, str] = {}


def count_key(counter: TokenCounter, overhead: MessageOverhead = DEFAULT_OVERHEAD) -> str:
    """The label of counts made by ``counter`` under ``overhead`` (caches and the store)."""
    if overhead is DEFAULT_OVERHEAD or overhead == DEFAULT_OVERHEAD:
        name = counter.name
        key = _DEFAULT_KEYS.get(name)
        if key is None:  # one string per counter keeps its hash: lookups stay cheap
            key = _DEFAULT_KEYS[name] = name + _DEFAULT_TAG
        return key
    return f"{counter.name}|{overhead!r}"


def message_frame(
    counter: TokenCounter, role: str, overhead: MessageOverhead = DEFAULT_OVERHEAD
) -> int:
    """What a message of ``role`` holding one text part costs beside the text."""
    n = overhead.per_message + overhead.per_part
    return n + role_tokens(counter, role) if overhead.count_role else n


def count_message(
    counter: TokenCounter, message: Message, overhead: MessageOverhead = DEFAULT_OVERHEAD
) -> int:
    """Tokens ``message`` costs in a request, cached on the message per counter."""
    key = _DEFAULT_KEYS.get(counter.name) if overhead is DEFAULT_OVERHEAD else None
    if key is None:
        key = count_key(counter, overhead)
    cache = message._token_cache
    hit = cache.get(key)
    if hit is not None:
        return hit
    role = role_tokens(counter, message.role) if overhead.count_role else 0
    results = message.role == "tool" and any(isinstance(p, ToolResultPart) for p in message.parts)
    # A tool message renders as one message per result (OpenAI Chat) or one block
    # each (Anthropic): each result pays the framing, not the message.
    n = 0 if results else overhead.per_message + role
    if message.name:
        n += overhead.per_name + counter.count(message.name)
    part = overhead.per_part
    for p in message.parts:
        if isinstance(p, TextPart):
            n += part + counter.count(p.text)
        elif isinstance(p, ToolCallPart):
            n += overhead.per_tool_call + counter.count(p.id) + counter.count(p.name)
            n += counter.count(p.arguments)
        elif isinstance(p, ToolResultPart):
            n += overhead.per_message + role + overhead.per_tool_result + counter.count(p.call_id)
            if isinstance(p.content, str):
                n += counter.count(p.content)
            else:
                for inner in p.content:
                    if isinstance(inner, TextPart):
                        n += part + counter.count(inner.text)
                    else:
                        n += overhead.image_tokens
        elif isinstance(p, ImagePart):
            n += overhead.image_tokens
        elif isinstance(p, ThinkingPart):
            n += part + counter.count(p.data or "" if p.redacted else p.text)
            n += counter.count(p.signature) if p.signature else 0
        elif isinstance(p, ProviderPart):
            n += part + payload_tokens(counter, p.data, overhead.image_tokens)
        if getattr(p, "native", None) is not None:
            n += _native_extra(counter, p, overhead)
    cache[key] = n
    return n


def _native_extra(counter: TokenCounter, p: Part, overhead: MessageOverhead) -> int:
    """What a neutral part's native wire form adds: strings the part does not hold."""
    native = getattr(p, "native", None)
    if native is None:
        return 0
    skip: tuple[str, ...]
    if isinstance(p, TextPart):
        skip = (p.text,)
    elif isinstance(p, ToolCallPart):
        skip = (p.id, p.name, p.arguments)
    elif isinstance(p, ToolResultPart):
        skip = (p.call_id, p.text)
    else:
        skip = ()
    return payload_tokens(counter, native.data, overhead.image_tokens, skip, media=False)


def count_messages(
    counter: TokenCounter,
    messages: Sequence[Message],
    overhead: MessageOverhead = DEFAULT_OVERHEAD,
) -> int:
    """Tokens of a whole request: every message plus the reply priming."""
    return overhead.reply_priming + sum(count_message(counter, m, overhead) for m in messages)
