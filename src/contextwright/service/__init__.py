"""The service: `Conversations`, the stateful layer over a store (append, build, import, compact,
read back), its background work and bounded caches, and the sync facade.
"""

from ._conversations import Conversations, MemoryFlush
from ._memory_writer import MemoryWriter, MemoryWriterStore, WriterStats, invalidate_user_memory

__all__ = [
    "Conversations",
    "MemoryFlush",
    "MemoryWriter",
    "MemoryWriterStore",
    "WriterStats",
    "invalidate_user_memory",
]
