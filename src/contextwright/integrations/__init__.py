"""Framework integrations, one extra each: `langchain` (``[langchain]``), `llamaindex`
(``[llamaindex]``), `openai_agents` (``[agents]``), `otel` (``[otel]``).

Each module imports its framework when it is imported (never from ``import
contextwright``) and raises `MissingDependencyError` naming its extra when the
framework is missing; `otel` is a no-op until `otel.instrument` is called.
"""
