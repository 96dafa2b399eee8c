"""Checks every text and metadata value of a message passes: strings UTF-8 can encode (no lone surrogates), JSON-safe metadata of bounded depth.

JSON-safe means standard JSON (RFC 8259), which has no NaN and no infinity.
Python's `json` writes ``float("nan")`` as ``NaN`` and reads ``NaN``,
``Infinity`` and ``1e400`` back as floats, so without a check such values would be
stored as text that a PostgreSQL ``jsonb`` cast, a JavaScript client or any strict
parser refuses. `dump_json` is how every store turns a user's value (metadata,
receipts, job payloads) into stored JSON, and `load_json` how a message reads the
JSON text it carries (tool-call arguments, provider payloads); both refuse a
non-finite number, naming the path to it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from .._errors import InvalidMessageError

__all__ = [
    "_KEY",
    "_MAX_METADATA_DEPTH",
    "_SCALARS",
    "NotFinite",
    "_check_metadata",
    "_require_str",
    "_unencodable_at",
    "check_unicode",
    "dump_json",
    "finite_loads",
    "load_json",
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
    """The path (keys and indexes) to the first value in ``value`` standard JSON text
    cannot hold: a string UTF-8 cannot encode, or a float that is NaN or infinite.

    ``()`` when ``value`` is such a value itself, None when there is none. A key
    that cannot be encoded is reported as ``(KEY, key)``. Paths are only built on
    the way back from a bad value, so a clean value costs one pass and no strings.
    """
    kind = type(value)
    if kind in _SCALARS:
        return None
    if kind is float or isinstance(value, float):  # a float subclass too (numpy's float64)
        return None if math.isfinite(value) else ()
    if kind is str or isinstance(value, str):
        return None if value.isascii() or lone_surrogate(value) is None else ()
    if depth >= _MAX_METADATA_DEPTH:
        raise InvalidMessageError(where, f"is nested more than {_MAX_METADATA_DEPTH} levels deep")
    if kind is dict or isinstance(value, Mapping):
        for key, item in value.items():
            if not (type(key) is str and key.isascii()) and _bad_key(key):
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


def _bad_key(key: object) -> bool:
    """A key UTF-8 cannot encode, or a float key json would write as ``"NaN"``/``"Infinity"``."""
    if isinstance(key, str):
        return lone_surrogate(key) is not None
    return isinstance(key, float) and not math.isfinite(key)


_SCALARS = frozenset({int, bool, type(None)})

# What a non-finite number is told: JSON has no such value, so it could not be read back.
_NOT_FINITE = "which standard JSON cannot hold (it has no NaN or infinity); send a finite number"


def _check_metadata(value: object, where: str) -> None:
    """Every string in ``value`` (keys included) must be encodable (see `lone_surrogate`)
    and every float finite; else `InvalidMessageError` naming the path, e.g.
    ``metadata['scores'][2]``."""
    path = _unencodable_at(value, where)
    if path is None:
        return
    bad: Any = value
    for step in path:
        if step is _KEY:  # the last step: the key itself
            key = path[-1]
            if isinstance(key, float):
                raise InvalidMessageError(
                    f"{where} key {key!r}", f"is not a finite number, {_NOT_FINITE}"
                )
            raise InvalidMessageError(f"{where} key {key!r}", unicode_problem(str(key)) or "")
        bad = bad[step]
        where += f"[{step!r}]"
    if isinstance(bad, float):
        raise InvalidMessageError(where, f"is {bad!r}, {_NOT_FINITE}")
    raise InvalidMessageError(where, unicode_problem(bad) or "")


# Compact, sorted keys (equal values give equal text: an idempotent re-append compares
# it), non-ASCII kept (Chinese stays readable and a third of the size), and no NaN or
# infinity. json.dumps with options builds a new encoder per call; one is enough.
_ENCODE = json.JSONEncoder(
    ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
).encode


def dump_json(value: Any, where: str) -> str:
    """``value`` as standard JSON text, or `InvalidMessageError` naming what is wrong and where.

    A NaN or infinite float anywhere in ``value`` is refused, its path named
    (``where`` then ``['key'][index]``...): Python would write ``NaN`` or
    ``Infinity``, which is not JSON. So is a string UTF-8 cannot encode. The value
    is walked only when encoding fails, so a good one costs the encoding alone.
    """
    try:
        text = _ENCODE(value)
    except (TypeError, ValueError, RecursionError) as exc:
        if not isinstance(exc, TypeError):  # a non-finite float, a cycle, too deep
            _check_metadata(value, where)
        raise InvalidMessageError(where, f"must be JSON-serialisable ({exc})") from None
    if not text.isascii() and lone_surrogate(text) is not None:
        _check_metadata(value, where)
    return text


class NotFinite(Exception):
    """Raised by `finite_loads`: the text holds NaN, an infinity, or a number that overflows."""


def _constant(token: str) -> float:
    raise NotFinite(token)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # "1e400": valid JSON syntax, but no double holds it
        raise NotFinite(text)
    return value


# The C scanner calls `_constant` for NaN, Infinity and -Infinity (which standard JSON
# does not have) and `_finite_float` for each number with a fraction or exponent;
# everything else it reads as json.loads does. One decoder: building one costs more
# than decoding a tool call's arguments.
_DECODE = json.JSONDecoder(parse_constant=_constant, parse_float=_finite_float).decode


def finite_loads(text: str | bytes) -> Any:
    """``text`` parsed as `json.loads` does, but `NotFinite` for a NaN, an infinity or a
    number no double holds; a syntax error raises `json.JSONDecodeError` as usual."""
    if isinstance(text, str):
        return _DECODE(text)
    return json.loads(text, parse_constant=_constant, parse_float=_finite_float)


def load_json(text: str, where: str) -> Any:
    """``text`` parsed as standard JSON, or `InvalidMessageError` naming what is wrong and where.

    Unlike `json.loads`, ``NaN``, ``Infinity``, ``-Infinity`` and numbers no double
    holds (``1e400``, read as infinity) are refused, the path to the first named
    (``where['key'][index]``): a value that is stored or sent on must read back
    the same in any JSON parser. A syntax error says so, with its position.
    """
    try:
        return finite_loads(text)
    except NotFinite:
        pass
    except (ValueError, RecursionError) as exc:
        raise InvalidMessageError(where, f"is not JSON ({exc})") from None
    try:  # again, reading them as floats (json.loads's default), to name the first
        parsed = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidMessageError(where, f"is not JSON ({exc})") from None
    _check_metadata(parsed, where)
    raise InvalidMessageError(where, f"holds a number {_NOT_FINITE}")
