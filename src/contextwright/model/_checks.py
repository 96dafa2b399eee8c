"""Checks every text and metadata value of a message passes: strings UTF-8 can encode (no lone surrogates), JSON-safe metadata of bounded depth."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._errors import InvalidMessageError

__all__ = [
    "_KEY",
    "_MAX_METADATA_DEPTH",
    "_SCALARS",
    "_check_metadata",
    "_require_str",
    "_unencodable_at",
    "check_unicode",
    "lone_surrogate",
    "unicode_problem",
]


def lone_surrogate(text: str) -> int | None:
    """The index of the first character UTF-8 cannot encode in ``text``, or None.

    Only a lone surrogate (U+D800..U+DFFF outside a pair, e.g. from JSON's
    ``"\\ud800"`` escape or a bad decode with ``errors="surrogateescape"``) can be
    such a character. It would fail later, as a raw `UnicodeEncodeError`, wherever
    the text is written out: SQLite, the request's JSON, a file. ASCII text, most
    of it, is answered without encoding.
    """
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def unicode_problem(text: str) -> str | None:
    """What is wrong with ``text`` if UTF-8 cannot encode it (see `lone_surrogate`), or None."""
    i = lone_surrogate(text)
    if i is None:
        return None
    return (
        f"holds a lone surrogate U+{ord(text[i]):04X} at index {i}; "
        "text must be valid Unicode (encodable as UTF-8)"
    )


def check_unicode(text: str, where: str) -> str:
    """``text`` if UTF-8 can encode it, else `InvalidMessageError` naming ``where``."""
    problem = unicode_problem(text)
    if problem is not None:
        raise InvalidMessageError(where, problem)
    return text


def _require_str(value: object, where: str, *, empty_ok: bool = False) -> None:
    if not isinstance(value, str):
        raise InvalidMessageError(where, f"must be a string, got {type(value).__name__}")
    if not empty_ok and not value:
        raise InvalidMessageError(where, "must not be empty")
    if not value.isascii():
        check_unicode(value, where)


# Metadata nested deeper than this is refused rather than walked (a cycle never ends).
_MAX_METADATA_DEPTH = 200


def _unencodable_at(value: Any, where: str, depth: int = 0) -> tuple[object, ...] | None:
    """The path (keys and indexes) to the first string in ``value`` UTF-8 cannot encode.

    ``()`` when ``value`` is such a string itself, None when there is none. A key
    that cannot be encoded is reported as ``(KEY, key)``. Paths are only built on
    the way back from a bad string, so a clean value costs one pass and no strings.
    """
    kind = type(value)
    if kind in _SCALARS:
        return None
    if kind is str or isinstance(value, str):
        return None if value.isascii() or lone_surrogate(value) is None else ()
    if depth >= _MAX_METADATA_DEPTH:
        raise InvalidMessageError(where, f"is nested more than {_MAX_METADATA_DEPTH} levels deep")
    if kind is dict or isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str) and not key.isascii() and lone_surrogate(key) is not None:
                return (_KEY, key)
            if type(item) is str and item.isascii():
                continue
            found = _unencodable_at(item, where, depth + 1)
            if found is not None:
                return (key, *found)
    elif kind is list or isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            if type(item) is str and item.isascii():
                continue
            found = _unencodable_at(item, where, depth + 1)
            if found is not None:
                return (i, *found)
    return None


_KEY = object()  # marks a bad mapping key in a path from `_unencodable_at`


_SCALARS = frozenset({int, float, bool, type(None)})


def _check_metadata(value: object, where: str) -> None:
    """Every string in ``value`` (keys included) must be encodable (see `lone_surrogate`)."""
    path = _unencodable_at(value, where)
    if path is None:
        return
    bad: Any = value
    for step in path:
        if step is _KEY:  # the last step: the key itself
            key = str(path[-1])
            raise InvalidMessageError(f"{where} key {key!r}", unicode_problem(key) or "")
        bad = bad[step]
        where += f"[{step!r}]"
    raise InvalidMessageError(where, unicode_problem(bad) or "")
