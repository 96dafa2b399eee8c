"""OpenTelemetry for contextwright: spans and metrics of builds, appends and compactions.

The extra ``[otel]`` (opentelemetry-api; bring your SDK and exporter)::

    from contextwright.integrations import otel

    otel.instrument()                  # the global tracer and meter providers
    otel.instrument(tracer_provider=tp, meter_provider=mp, capture_content=True)
    otel.uninstrument()

    engine.tracer = otel.OTelTracer(tracer_provider=tp)   # one engine only (and the
                                                          # Conversations over it)

`OTelTracer` implements the library's tracing hook (`contextwright._trace.Tracer`)
on opentelemetry-api; `instrument` installs one for the whole process. Until then
(and without OpenTelemetry at all) every span is a shared no-op object. Span and
metric names, attributes: docs/integrations/otel.md. Message text goes into spans
only with ``capture_content=True``. Importing this module does not import
OpenTelemetry; `OTelTracer` and `instrument` raise `MissingDependencyError`
naming the extra when it is missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any

from .._errors import MissingDependencyError
from .._trace import Attributes, AttrValue, set_tracer
from ..pipeline._tracing import DURATION, TOKENS

if TYPE_CHECKING:
    from opentelemetry.metrics import Histogram, Meter, MeterProvider
    from opentelemetry.trace import Span as OSpan
    from opentelemetry.trace import TracerProvider

__all__ = ["OTelTracer", "instrument", "uninstrument"]

SCOPE = "contextwright"
# histogram buckets: build durations (seconds) and section sizes (tokens)
_HISTOGRAMS: dict[str, tuple[str, str, Sequence[float]]] = {
    DURATION: (
        "s",
        "Duration of a context build",
        (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    ),
    TOKENS: (
        "{token}",
        "Tokens a build spent per section (attribute contextwright.section)",
        (0, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576),
    ),
}


def _otel() -> tuple[Any, Any, Any]:
    """opentelemetry's trace, metrics and context modules, or the error naming the extra."""
    try:
        from opentelemetry import context, metrics, trace
    except ImportError as exc:
        raise MissingDependencyError("opentelemetry-api", "otel", "OpenTelemetry tracing") from exc
    return trace, metrics, context


def _version() -> str | None:
    try:
        return metadata.version("contextwright")
    except metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return None


class _Span:
    """An OpenTelemetry span as the hook's `Span`: current inside its ``with`` block.

    Inside a trace that is not sampled (a parent span with the sampled flag off) no
    span is made: with the SDK's parent-based samplers it would not be recorded
    either, and making it is most of the cost of tracing a build.
    """

    __slots__ = ("_attributes", "_name", "_owner", "_span", "_token")

    def __init__(self, owner: OTelTracer, name: str, attributes: Attributes | None) -> None:
        self._owner, self._name, self._attributes = owner, name, attributes
        self._span: OSpan | None = None
        self._token: object = None

    def __enter__(self) -> _Span:
        o = self._owner
        parent = o._trace.get_current_span().get_span_context()
        if parent.is_valid and not parent.trace_flags.sampled:
            return self  # in a trace that is not sampled: nothing to record, nothing made
        self._span = span = o._tracer.start_span(self._name, attributes=self._attributes)
        self._token = o._context.attach(o._trace.set_span_in_context(span))
        return self

    def __exit__(self, tp: object, exc: BaseException | None, tb: object) -> None:
        span = self._span
        if span is None:
            return
        try:
            if exc is not None and not isinstance(exc, GeneratorExit):
                self.error(exc)
        finally:
            self._owner._context.detach(self._token)
            span.end()

    @property
    def recording(self) -> bool:
        return self._span is not None and self._span.is_recording()

    def set(self, key: str, value: AttrValue) -> None:
        if self._span is not None:
            self._span.set_attribute(key, value)

    def update(self, attributes: Attributes) -> None:
        if self._span is not None:
            self._span.set_attributes(attributes)

    def error(self, exc: BaseException, description: str | None = None) -> None:
        """Status ERROR, an exception event, and ``error.type`` the exception's class name."""
        span = self._span
        if span is None:
            return
        status = self._owner._trace.Status(
            self._owner._trace.StatusCode.ERROR, description or f"{type(exc).__name__}: {exc}"
        )
        span.set_attribute("error.type", type(exc).__name__)
        span.record_exception(exc)
        span.set_status(status)


class OTelTracer:
    """The tracing hook on opentelemetry-api: spans from ``tracer_provider``, histograms
    from ``meter_provider`` (None: the global providers, as set by the SDK's
    ``set_tracer_provider`` / ``set_meter_provider``, also later).

    ``capture_content`` puts message text into spans (``gen_ai.input.messages`` on a
    build, ``contextwright.content`` on appends and summaries, the memory query).
    """

    enabled = True

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        *,
        capture_content: bool = False,
    ) -> None:
        self._trace, metrics, self._context = _otel()
        version = _version()
        self._tracer = self._trace.get_tracer(SCOPE, version, tracer_provider)
        self._meter: Meter = metrics.get_meter(SCOPE, version, meter_provider)
        self._histograms: dict[str, Histogram] = {}
        self.capture_content = bool(capture_content)

    def span(self, name: str, attributes: Attributes | None = None) -> _Span:
        return _Span(self, name, attributes)

    def record(self, metric: str, value: float, attributes: Attributes | None = None) -> None:
        histogram = self._histograms.get(metric)
        if histogram is None:
            unit, description, buckets = _HISTOGRAMS.get(metric, ("", "", ()))
            histogram = self._meter.create_histogram(
                metric, unit, description, explicit_bucket_boundaries_advisory=buckets or None
            )
            self._histograms[metric] = histogram
        histogram.record(value, attributes)


def instrument(
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    capture_content: bool = False,
) -> OTelTracer:
    """Send every engine's spans and metrics to OpenTelemetry (engines with a ``tracer``
    of their own excepted); returns the tracer installed. Calling it again replaces it."""
    tracer = OTelTracer(tracer_provider, meter_provider, capture_content=capture_content)
    set_tracer(tracer)
    return tracer


def uninstrument() -> None:
    """Back to no tracing: the no-op tracer for the whole process."""
    set_tracer(None)
