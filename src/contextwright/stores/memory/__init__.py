"""The in-memory backend: the store contract in plain dicts (public as `contextwright.testing.MemoryBackend`)."""

from ._backend import MemoryBackend

__all__ = ["MemoryBackend"]
