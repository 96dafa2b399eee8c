"""Checking `ContextEngine`'s settings: a `ConfigError` naming the first argument that is wrong."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .._errors import ConfigError
from ..model._blocks import Block
from ..model._checks import unicode_problem
from ..tokens._frame import MessageOverhead

__all__ = ["check_settings", "check_text"]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_text(value: object, label: str, *, empty_ok: bool = True) -> None:
    """A setting that must be a string UTF-8 can encode (and, unless ``empty_ok``, not empty)."""
    if not isinstance(value, str):
        raise ConfigError(f"{label} must be a string, got {type(value).__name__}")
    if not empty_ok and not value:
        raise ConfigError(f"{label} must not be empty")
    if not value.isascii() and (problem := unicode_problem(value)) is not None:
        raise ConfigError(f"{label} {problem}")


def check_settings(
    *, system_prompt: object, pinned: object, sources: object, model: object, counter: object,
    cache: object, locale: object, restate_goal: object, goal_chars: object,
    max_message_tokens: object, overhead: object, clock: object, templates: object,
    task_status: object,
) -> None:  # fmt: skip
    """`ConfigError` naming the first constructor argument of `ContextEngine` that is wrong."""
    check_text(system_prompt, "system_prompt")
    if isinstance(pinned, (str, bytes)) or not isinstance(pinned, Sequence):
        raise ConfigError(f"pinned must be a sequence of strings or Blocks, got {pinned!r}")
    for i, p in enumerate(pinned):
        if not isinstance(p, Block):
            check_text(p, f"pinned[{i}]")
    if isinstance(sources, (str, bytes)) or not isinstance(sources, Sequence):
        raise ConfigError(f"sources must be a sequence of Source, got {type(sources).__name__}")
    if model is not None:
        check_text(model, "model", empty_ok=False)
    if counter is not None and not callable(getattr(counter, "count", None)):
        raise ConfigError(f"counter must be a TokenCounter, got {type(counter).__name__}")
    if (
        cache is not None
        and not isinstance(cache, str)
        and not all(callable(getattr(cache, m, None)) for m in ("get", "set", "invalidate"))
    ):
        raise ConfigError(f"cache must be a Cache, got {type(cache).__name__}")
    check_text(locale, "locale", empty_ok=False)
    if not isinstance(restate_goal, bool):
        raise ConfigError(f"restate_goal must be a bool, got {restate_goal!r}")
    if not _is_int(goal_chars) or goal_chars < 1:  # type: ignore[operator]
        raise ConfigError(f"goal_chars must be a positive integer, got {goal_chars!r}")
    if max_message_tokens is not None and (
        not _is_int(max_message_tokens) or max_message_tokens < 16  # type: ignore[operator]
    ):
        raise ConfigError(
            f"max_message_tokens must be an integer of at least 16 (or None), got "
            f"{max_message_tokens!r}"
        )
    if not isinstance(overhead, (MessageOverhead, str)):
        raise ConfigError(
            f"overhead must be a MessageOverhead or a provider name, got {type(overhead).__name__}"
        )
    if not callable(clock):
        raise ConfigError("clock must be a callable returning seconds since the epoch")
    if templates is not None:
        if not isinstance(templates, Mapping):
            raise ConfigError(f"templates must be a mapping of strings, got {templates!r}")
        for key, text in templates.items():
            check_text(text, f"templates[{key!r}]")
    if task_status is not None and not callable(task_status):
        raise ConfigError("task_status must be a callable (or None)")
