"""Framework integrations: contextwright in place of a framework's own trimming or memory.

Each module is an extra and imports its framework when it is imported (a missing one
raises `MissingDependencyError` naming the extra); ``import contextwright`` never
imports any of them. ``llamaindex`` (extra ``[llamaindex]``): a LlamaIndex memory and
memory block; ``openai_agents`` (extra ``[agents]``): an OpenAI Agents SDK session;
``langchain`` and ``otel`` likewise (see docs/integrations/).
"""
