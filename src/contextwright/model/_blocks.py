"""Blocks: the unit of injected context, and how one is written into a prompt.

A `Block` is what a source returns: a name (which becomes the tag), a priority, the
content, and what the engine needs to place it (static or dynamic, section) and to
explain it (provenance, ttl, tags). It is rendered as an XML-like tag (all context is
injected in one XML-like tag format; docs/design-notes.md, Blocks and priorities):

    <user_memory source="memory" count="3">
    - [FACT] …
    </user_memory>

Escaping is what makes the tags trustworthy. Content comes from users, tools and
memories, so it could contain ``</user_memory>`` or ``<collected_info>`` and close a
tag early or forge a block. `escape_content` turns every ``<`` into ``&lt;`` — with
no ``<`` left, no tag can be opened or closed — and ``&`` into ``&amp;`` only where it
starts something that reads like an entity (``&lt;``, ``&#60;``), so that the escaping
is reversible (`unescape_content`) while ordinary text such as "R&B" or "a > b" stays
as written. Attribute values also escape the double quote.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Literal, TypeAlias

from .._errors import ConfigError
from ._checks import unicode_problem

__all__ = [
    "Block",
    "Priority",
    "Section",
    "escape_attribute",
    "escape_content",
    "render_block",
    "unescape_content",
]


class Priority(IntEnum):
    """Lower is more important. Any int works; these are the built-in sources' three levels."""

    P0 = 0  # critical: never dropped (docs/design-notes.md, Blocks and priorities)
    P1 = 1  # important: truncated to fit
    P2 = 2  # optional: dropped first


Section: TypeAlias = Literal["system", "summary", "retrieved", "recent", "input"]
SECTIONS: tuple[Section, ...] = ("system", "summary", "retrieved", "recent", "input")

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_ENTITY_LIKE = re.compile(r"&(?=#?[A-Za-z0-9]+;)")
_UNESCAPE = re.compile(r"&(lt|amp|quot);")


@dataclass(frozen=True, slots=True)
class Block:
    """One piece of injected context.

    ``priority``: `Priority` or any int (lower = more important; <= 0 is never dropped).
    ``tokens``: filled in by the engine when None. ``static``: stable across turns, so
    it belongs in the cached prefix. ``section``: which budget share it draws on
    (``retrieved`` by default; static blocks draw on ``system``). ``attrs`` become tag
    attributes. ``raw``: the content is already formatted markup written by trusted
    code (e.g. a template) and is not escaped — never set it for user, tool or
    memory text.
    """

    name: str
    content: str
    priority: int = Priority.P1
    tokens: int | None = None
    provenance: str = ""
    ttl: float = 0.0
    tags: frozenset[str] = field(default_factory=frozenset)
    static: bool = False
    section: Section | None = None
    attrs: Mapping[str, str] = field(default_factory=dict)
    raw: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ConfigError(
                f"block name {self.name!r} must start with a letter or underscore and hold only "
                "letters, digits, '_', '.', '-'"
            )
        if not isinstance(self.content, str):
            raise ConfigError(f"block {self.name!r}: content must be a string")
        if not self.content.isascii() and (problem := unicode_problem(self.content)) is not None:
            raise ConfigError(f"block {self.name!r}: content {problem}")
        for key, value in self.attrs.items():
            if not _NAME.match(key):
                raise ConfigError(f"block {self.name!r}: attribute name {key!r} is not valid")
            if isinstance(value, str) and (problem := unicode_problem(value)) is not None:
                raise ConfigError(f"block {self.name!r}: attribute {key!r} {problem}")
        if not isinstance(self.tags, frozenset):
            object.__setattr__(self, "tags", frozenset(self.tags))

    @property
    def target_section(self) -> Section:
        if self.section is not None:
            return self.section
        return "system" if self.static else "retrieved"

    @property
    def empty(self) -> bool:
        return not self.content.strip()

    def with_content(self, content: str, **changes: Any) -> Block:
        values = {f: getattr(self, f) for f in self.__dataclass_fields__}
        values.update(content=content, tokens=None)
        values.update(changes)
        return Block(**values)


def escape_content(text: str) -> str:
    """Make ``text`` safe inside a block: no ``<`` survives, and the escaping is reversible."""
    if "&" in text:
        text = _ENTITY_LIKE.sub("&amp;", text)
    if "<" in text:
        text = text.replace("<", "&lt;")
    return text


def unescape_content(text: str) -> str:
    """Invert `escape_content` (and `escape_attribute`)."""
    return _UNESCAPE.sub(lambda m: {"lt": "<", "amp": "&", "quot": '"'}[m.group(1)], text)


def escape_attribute(value: str) -> str:
    """Escape an attribute value (also the double quote and line breaks)."""
    value = escape_content(value).replace('"', "&quot;")
    return value.replace("\n", " ").replace("\r", " ")


def render_block(block: Block) -> str:
    """The block as ``<name attr="…">\\ncontent\\n</name>``, content escaped unless ``raw``."""
    attrs = "".join(f' {k}="{escape_attribute(str(v))}"' for k, v in block.attrs.items())
    body = block.content if block.raw else escape_content(block.content)
    return f"<{block.name}{attrs}>\n{body}\n</{block.name}>"
