"""Integrations: contextwright inside other frameworks and tools, each behind its own extra.

`otel` (OpenTelemetry spans and metrics, extra ``[otel]``). Each module imports its
framework lazily; nothing here is imported by ``import contextwright``.
"""
