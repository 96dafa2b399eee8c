"""Framework integrations, one extra each: `langchain`, `llamaindex`, `openai_agents`, `otel`.

Each module imports its framework when it is imported (never from ``import
contextwright``) and raises `MissingDependencyError` naming its extra when the
framework is missing.
"""
