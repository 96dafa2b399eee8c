"""The tracing hook: spans and metrics that every part may report to, a no-op by default.

The ground floor of observability. The pipeline (a build and each stage, each
source fetch), the service (appends, compactions, summaries) and the memory
source's search open spans through a `Tracer`; nothing here knows OpenTelemetry.
`contextwright.integrations.otel` implements `Tracer` on opentelemetry-api and
installs it with ``instrument()``. Until something is installed the tracer is
`NO_TRACER`, whose spans are one shared object that does nothing: a build pays a
few attribute look-ups and ``with`` statements, and callers skip computing
attributes when ``tracer.enabled`` is False.

Which tracer a call uses (`current`): the one activated for the running context
(`activate`: a `ContextEngine` with its own ``tracer`` activates it for its
build, so that its sources report there too), else the process-wide one
(`set_tracer`). Attribute values are what OpenTelemetry accepts: str, bool, int,
float, or a sequence of one of those. Message text never goes into an attribute
unless ``tracer.capture_content`` is True; callers check it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol, TypeAlias, runtime_checkable

__all__ = [
    "NO_SPAN",
    "NO_TRACER",
    "AttrValue",
    "Attributes",
    "NoTracer",
    "Span",
    "Tracer",
    "activate",
    "current",
    "set_tracer",
]

AttrValue: TypeAlias = (
    "str | bool | int | float | Sequence[str] | Sequence[bool] | Sequence[int] | Sequence[float]"
)
Attributes: TypeAlias = Mapping[str, AttrValue]


@runtime_checkable
class Span(Protocol):
    """One timed operation. ``recording`` is False for a span that keeps nothing."""

    @property
    def recording(self) -> bool: ...

    def set(self, key: str, value: AttrValue) -> None:
        """Set one attribute."""

    def update(self, attributes: Attributes) -> None:
        """Set several attributes."""

    def error(self, exc: BaseException, description: str | None = None) -> None:
        """Mark the span failed by ``exc`` without raising it (a failed source the
        build goes on without). An exception leaving the ``with`` block is recorded
        by the tracer itself."""


@runtime_checkable
class Tracer(Protocol):
    """Where spans and measurements go.

    ``span`` is a context manager around the work it times, the current span for
    what runs inside (nested spans are its children); an exception leaving it marks
    it failed (status error, an exception event, ``error.type`` its class name).
    ``record`` adds one measurement to a histogram by name
    (``contextwright.build.duration`` in seconds, ``contextwright.build.tokens``).
    """

    @property
    def enabled(self) -> bool: ...

    @property
    def capture_content(self) -> bool: ...

    def span(
        self, name: str, attributes: Attributes | None = None
    ) -> AbstractContextManager[Span]: ...

    def record(self, metric: str, value: float, attributes: Attributes | None = None) -> None: ...


class _NoSpan:
    """The span of `NoTracer`: a reusable context manager that keeps nothing."""

    __slots__ = ()
    recording = False

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set(self, key: str, value: AttrValue) -> None:
        pass

    def update(self, attributes: Attributes) -> None:
        pass

    def error(self, exc: BaseException, description: str | None = None) -> None:
        pass


NO_SPAN = _NoSpan()


class NoTracer:
    """The default tracer: every span is `NO_SPAN`, every measurement dropped."""

    __slots__ = ()
    enabled = False
    capture_content = False

    def span(self, name: str, attributes: Attributes | None = None) -> _NoSpan:
        return NO_SPAN

    def record(self, metric: str, value: float, attributes: Attributes | None = None) -> None:
        pass


NO_TRACER: Tracer = NoTracer()
_global: Tracer = NO_TRACER
_active: contextvars.ContextVar[Tracer | None] = contextvars.ContextVar(
    "contextwright_tracer", default=None
)


def current() -> Tracer:
    """The tracer in force here: the one `activate`\\ d for this context, else the global one."""
    tracer = _active.get()
    return _global if tracer is None else tracer


def set_tracer(tracer: Tracer | None) -> Tracer:
    """Install ``tracer`` for the whole process (None: back to `NO_TRACER`); returns the previous one."""
    global _global
    previous, _global = _global, (NO_TRACER if tracer is None else tracer)
    return previous


@contextmanager
def activate(tracer: Tracer | None) -> Iterator[Tracer]:
    """Make ``tracer`` the current one in this context (and tasks started in it) while inside.

    None changes nothing: the current tracer is yielded.
    """
    if tracer is None:
        yield current()
        return
    token = _active.set(tracer)
    try:
        yield tracer
    finally:
        _active.reset(token)
