"""Adapters: the neutral message model to and from the providers' wire formats.

Three formats are supported, each with a reader, a renderer and a validator that
reproduces the provider's HTTP 400 rejections:

=====================  ==================  =====================  ========================
format                 read                render                 validate
=====================  ==================  =====================  ========================
OpenAI Chat            `from_openai_chat`  `render_openai_chat`   `validate_openai_chat`
OpenAI Responses       `from_responses`    `render_responses`     `validate_responses`
Anthropic Messages     `from_anthropic`    `render_anthropic`     `validate_anthropic`
=====================  ==================  =====================  ========================

Readers raise `InvalidMessageError` naming the position of anything malformed;
renderers validate their output by default, so a request the provider would
reject raises `ProviderRuleError` (with a rule id and position) before it is
sent. Every renderer takes ``notes``, a list to which it appends a `RenderNote`
for each part it converted or dropped (another provider's thinking, documents,
compactions: docs/providers.md). `detect_format` tells which shape a JSON payload has, and `read_messages`
reads a list of any shape (contextwright's own `Message.to_dict` included). Each module's
docstring lists its conventions: how system messages after the history, tool
results and merged turns are rendered, and what has no equivalent on the wire.
"""

from __future__ import annotations

from ._anthropic import FIRST_USER_TEXT, from_anthropic, render_anthropic
from ._detect import Format, detect_format, read_messages
from ._foreign import RenderNote
from ._openai_chat import from_openai_chat, render_openai_chat
from ._openai_responses import from_responses, render_responses
from ._rules import validate_anthropic, validate_openai_chat, validate_responses

__all__ = [
    "FIRST_USER_TEXT",
    "Format",
    "RenderNote",
    "detect_format",
    "from_anthropic",
    "from_openai_chat",
    "from_responses",
    "read_messages",
    "render_anthropic",
    "render_openai_chat",
    "render_responses",
    "validate_anthropic",
    "validate_openai_chat",
    "validate_responses",
]
