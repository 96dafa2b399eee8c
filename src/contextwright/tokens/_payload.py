"""Counting provider content kept verbatim: thinking, provider parts and native wire forms.

The providers do not publish how they charge most of this content, so the count
errs high, never low (docs/providers.md, "Token accounting"): every string that is
sent is counted as text by the configured counter — thinking text, signatures,
encrypted reasoning and compaction payloads, ids — except binary media, which is
charged as the providers charge media: an image as `MessageOverhead.image_tokens`,
a PDF per page (`PDF_PAGE_TOKENS`: Anthropic's "1,500–3,000 tokens per page" of
text plus the page as an image), audio per second of sound. Media given by URL or
file id cannot be measured offline and is charged as one image or one page.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator, Mapping
from typing import Any

from ._count import TokenCounter

__all__ = ["AUDIO_BYTES_PER_TOKEN", "PDF_PAGE_TOKENS", "payload_tokens", "pdf_pages"]

# A PDF page: up to 3,000 tokens of text and the page's image (at most 1,600).
PDF_PAGE_TOKENS = 4600

# Audio input: about 10 tokens a second of speech (OpenAI's audio models); 1,000
# bytes of audio is under a tenth of a second of 16-bit PCM and about half a second
# of 16 kbit/s compressed speech, so a token per 1,000 bytes never charges too little.
AUDIO_BYTES_PER_TOKEN = 1000

_PAGE = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")
_DATA_URL = re.compile(r"^data:([\w.+-]+/[\w.+-]+)(?:;[\w-]+=[^;,]*)*;base64,", re.S)


def pdf_pages(b64: str) -> int:
    """The number of pages of a base64 PDF (at least 1; 1 when it cannot be read)."""
    try:
        raw = base64.b64decode(b64, validate=False)
    except (binascii.Error, ValueError):
        return 1
    return max(1, len(_PAGE.findall(raw)))


def _media(media_type: str, b64: str, image_tokens: int) -> int:
    if media_type == "application/pdf":
        return pdf_pages(b64) * PDF_PAGE_TOKENS
    if media_type.startswith("image/"):
        return image_tokens
    if media_type.startswith("audio/"):
        return len(b64) * 3 // 4 // AUDIO_BYTES_PER_TOKEN + 1
    return -1  # not media: count as text


def _strings(value: Any, image_tokens: int, unknown: int, media: list[int]) -> Iterator[str]:
    """The strings of a payload that are text; media is charged into ``media`` (media
    given by URL or file id as ``unknown``)."""
    if isinstance(value, str):
        found = _DATA_URL.match(value) if value.startswith("data:") else None
        if found is not None:
            cost = _media(found.group(1), value[found.end() :], image_tokens)
            if cost >= 0:
                media.append(cost)
                return
        yield value
    elif isinstance(value, Mapping):
        kind = value.get("type")
        if kind == "base64" and isinstance(value.get("data"), str):
            cost = _media(str(value.get("media_type", "")), value["data"], image_tokens)
            if cost >= 0:
                media.append(cost)
                yield from (v for k, v in value.items() if k != "data" and isinstance(v, str))
                return
        if kind in ("url", "file") and ("url" in value or "file_id" in value):
            media.append(unknown)
        audio = value.get("input_audio")
        if isinstance(audio, Mapping) and isinstance(audio.get("data"), str):
            media.append(len(audio["data"]) * 3 // 4 // AUDIO_BYTES_PER_TOKEN + 1)
            return
        if kind == "image_generation_call" and isinstance(value.get("result"), str):
            media.append(image_tokens)
            value = {k: v for k, v in value.items() if k != "result"}
        for item in value.values():
            yield from _strings(item, image_tokens, unknown, media)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item, image_tokens, unknown, media)


# Kinds whose media given by URL or file id is charged as a PDF page, not an image.
_DOCUMENT_KINDS = frozenset({"document", "file", "input_file", "container_upload"})


def payload_tokens(
    counter: TokenCounter,
    payload: Mapping[str, Any],
    image_tokens: int,
    skip: frozenset[str] | tuple[str, ...] = (),
    *,
    media: bool = True,
) -> int:
    """What the strings and media of a wire payload cost; strings in ``skip`` are free
    (the neutral part counted them already), and media too without ``media``."""
    kind = payload.get("type")
    unknown = PDF_PAGE_TOKENS if kind in _DOCUMENT_KINDS else image_tokens
    charged: list[int] = []
    n = 0
    for s in _strings(payload, image_tokens, unknown, charged):
        if s and s not in skip:
            n += counter.count(s)
    return n + sum(charged) if media else n
