"""Prometheus metrics of the service, served at ``/metrics``.

- ``contextwright_build_seconds`` — build latency (histogram, by format);
- ``contextwright_build_section_tokens`` — tokens per section of each build
  (histogram, by section: system, summary, recent, retrieved, input…);
- ``contextwright_build_tokens`` — tokens used per build (histogram);
- ``contextwright_cache_hits_total`` / ``_misses_total`` — block cache, per build;
- ``contextwright_errors_total`` — errors answered, by error type;
- ``contextwright_requests_total`` and ``contextwright_request_seconds`` — by
  method, route template (``/v1/conversations/{conversation}``: never an id) and status.

No label ever holds tenant data: not a tenant, key, user or conversation id.

With several workers (``--workers N``), every process writes its samples to
``$PROMETHEUS_MULTIPROC_DIR`` (set by ``contextwright serve`` before the workers
start) and ``/metrics`` adds them up (prometheus_client's multiprocess mode),
whichever worker answers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]

_TOKENS = (0, 64, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    """The service's metrics, in a registry of their own (several apps may share a process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.build_seconds = Histogram(
            "contextwright_build_seconds", "Build latency (seconds)", ["format"],
            buckets=_SECONDS, registry=r,
        )  # fmt: skip
        self.section_tokens = Histogram(
            "contextwright_build_section_tokens", "Tokens per section of a build", ["section"],
            buckets=_TOKENS, registry=r,
        )  # fmt: skip
        self.build_tokens = Histogram(
            "contextwright_build_tokens", "Tokens used by a build", buckets=_TOKENS, registry=r
        )
        self.cache_hits = Counter(
            "contextwright_cache_hits", "Blocks served from the block cache", registry=r
        )
        self.cache_misses = Counter(
            "contextwright_cache_misses", "Blocks fetched afresh (cacheable)", registry=r
        )
        self.errors = Counter(
            "contextwright_errors", "Errors answered, by type", ["type"], registry=r
        )
        self.requests = Counter(
            "contextwright_requests", "Requests answered", ["method", "route", "status"],
            registry=r,
        )  # fmt: skip
        self.request_seconds = Histogram(
            "contextwright_request_seconds", "Request latency (seconds)", ["method", "route"],
            buckets=_SECONDS, registry=r,
        )  # fmt: skip

    def build(self, fmt: str, seconds: float, receipt: Mapping[str, Any]) -> None:
        self.build_seconds.labels(fmt).observe(seconds)
        self.build_tokens.observe(float(receipt.get("used", 0)))
        for name, section in receipt.get("sections", {}).items():
            self.section_tokens.labels(str(name)).observe(float(section.get("used", 0)))
        self.cache_hits.inc(int(receipt.get("cache_hits", 0)))
        self.cache_misses.inc(int(receipt.get("cache_misses", 0)))

    def error(self, name: str) -> None:
        self.errors.labels(name).inc()

    def request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method, route, str(status)).inc()
        self.request_seconds.labels(method, route).observe(seconds)

    def exposition(self) -> bytes:
        """The text format of every sample: this process's, or all workers' in multiprocess mode."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry)
        return generate_latest(self.registry)
