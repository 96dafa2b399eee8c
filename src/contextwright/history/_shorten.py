"""Shortening for the window: a history message cut to a token limit (in the prompt only), and the placeholder that stands in for a turn's opening user message when the window keeps its tool steps but not the message itself."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from ..model._messages import Message
from ..model._parts import Part, TextPart, ToolResultPart
from ..tokens._count import TokenCounter
from ..tokens._frame import DEFAULT_OVERHEAD, MessageOverhead, count_message
from ..tokens._truncate import truncate_to_tokens

__all__ = [
    "OPENER_HEAD_TOKENS",
    "OPENER_NO_TEXT",
    "OPENER_TEXT",
    "OPENER_UNKNOWN",
    "SHORT_MARKER",
    "ShortenCache",
    "_part_text_tokens",
    "opener_placeholder",
    "shorten_message",
    "turn_opener",
]


SHORT_MARKER = "…[{omitted} characters cut from this message in the prompt]…"


# The user message put before a window that starts inside a turn, when the turn's
# opening message does not fit verbatim (see `opener_placeholder`).
OPENER_TEXT = (
    "[The user message that opened this turn ({tokens} tokens{images}) is shortened "
    "to fit the context; it began: {head}]"
)


OPENER_NO_TEXT = (
    "[The user message that opened this turn ({tokens} tokens{images}) is left out "
    "to fit the context.]"
)


OPENER_UNKNOWN = "[Earlier messages of this conversation are left out to fit the context.]"


OPENER_HEAD_TOKENS = 40


class ShortenCache:
    """Remembers shortened copies so a long message is cut once, not at every build."""

    def __init__(self, maxsize: int = 4096) -> None:
        self.maxsize = maxsize
        self._items: OrderedDict[tuple[str, int, str], Message] = OrderedDict()

    def get(self, key: tuple[str, int, str]) -> Message | None:
        m = self._items.get(key)
        if m is not None:
            self._items.move_to_end(key)
        return m

    def put(self, key: tuple[str, int, str], message: Message) -> None:
        self._items[key] = message
        if len(self._items) > self.maxsize:
            self._items.popitem(last=False)


def _part_text_tokens(counter: TokenCounter, part: Part) -> int:
    if isinstance(part, TextPart):
        return counter.count(part.text)
    if isinstance(part, ToolResultPart) and isinstance(part.content, str):
        return counter.count(part.content)
    return 0


def shorten_message(
    message: Message,
    max_tokens: int,
    counter: TokenCounter,
    overhead: MessageOverhead = DEFAULT_OVERHEAD,
    cache: ShortenCache | None = None,
) -> Message:
    """A copy of ``message`` costing at most about ``max_tokens``, or the message itself.

    Only text parts and string tool results are cut; the parts' budget is shared in
    proportion to their size. Metadata records ``shortened_from`` (tokens before).
    Images, thinking and provider parts are never cut; when they alone exceed
    ``max_tokens``, the message is returned as it is.
    """
    before = count_message(counter, message, overhead)
    if before <= max_tokens:
        return message
    key = (message.id, max_tokens, counter.name)
    if cache is not None:
        hit = cache.get(key)
        if hit is not None:
            return hit
    sizes = [_part_text_tokens(counter, p) for p in message.parts]
    cuttable = sum(sizes)
    fixed = before - cuttable
    if fixed >= max_tokens:  # what cannot be cut (a document, thinking) is over the limit
        return message  # alone: cutting the text would lose it and gain nothing
    room = max_tokens - fixed
    parts: list[Part] = []
    for part, size in zip(message.parts, sizes, strict=True):
        if size == 0 or cuttable == 0:
            parts.append(part)
            continue
        share = room * size // cuttable
        if isinstance(part, TextPart):
            parts.append(
                TextPart(truncate_to_tokens(part.text, share, counter, marker=SHORT_MARKER))
            )
        elif isinstance(part, ToolResultPart) and isinstance(part.content, str):
            cut = truncate_to_tokens(part.content, share, counter, keep="both", marker=SHORT_MARKER)
            parts.append(ToolResultPart(part.call_id, cut, part.is_error, part.name))
        else:
            parts.append(part)
    meta = dict(message.metadata)
    meta["shortened_from"] = before
    short = message.replace(parts=tuple(parts), metadata=meta)
    if cache is not None:
        cache.put(key, short)
    return short


def turn_opener(history: Sequence[Message], before: int, stop: int = 0) -> int | None:
    """The index of the newest user message in ``history[stop:before]``, or None.

    Scans back over the turn's assistant and tool messages only.
    """
    i = before - 1
    while i >= stop:
        if history[i].role == "user":
            return i
        i -= 1
    return None


def opener_placeholder(
    message: Message | None,
    counter: TokenCounter,
    overhead: MessageOverhead = DEFAULT_OVERHEAD,
    cache: ShortenCache | None = None,
) -> Message:
    """A short user message standing for ``message`` (a turn's opening user message).

    It quotes the message's first words and says how long it was. With ``message``
    None (the turn's opening is not in the history), a note that earlier messages
    are left out. The same placeholder is returned for the same message and counter.
    """
    if message is None:
        return Message.user(OPENER_UNKNOWN, id="opener-unknown", metadata={"placeholder": True})
    key = (message.id, -1, counter.name)
    if cache is not None:
        hit = cache.get(key)
        if hit is not None:
            return hit
    tokens = count_message(counter, message, overhead)
    images = sum(1 for p in message.parts if not isinstance(p, TextPart))
    extra = f", {images} image(s)" if images else ""
    head = truncate_to_tokens(
        " ".join(message.text.split()), OPENER_HEAD_TOKENS, counter, marker="…"
    )
    text = (
        OPENER_TEXT.format(tokens=tokens, images=extra, head=head)
        if head
        else OPENER_NO_TEXT.format(tokens=tokens, images=extra)
    )
    meta = {"placeholder": True, "placeholder_for": message.id}
    made = Message.user(text, id=f"{message.id}-opener", metadata=meta)
    if cache is not None:
        cache.put(key, made)
    return made
