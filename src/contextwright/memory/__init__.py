"""Long-term memory: scoped records, hybrid search, embeddings (docs/architecture.md).

    store = SQLiteMemoryStore("chat.db")                  # the conversations' file
    scope = Scope("acme", "u1")
    store.add(scope, "我在上海工作", category="fact", importance=80, key="city")
    store.search_sync(scope, "上海")[0].memory.content    # '我在上海工作'
    await store.search(scope, "where does she work?", 3)  # the MemoryStore protocol

- `_base` — `Scope`, `Memory`, `MemoryHit`, the async `MemoryStore` protocol the
  user-memory source reads through, `InMemoryMemoryStore`, and the validators;
- `_sqlite` — `SQLiteMemoryStore`: persistence in the same SQLite file as the
  conversations, supersession, near-duplicate lookup, hybrid search;
- `_search` — the pure part of search: terms, coverage, fusion and weighting
  formulas, the per-scope `VectorIndex`;
- `_embed` — the `Embedder` protocol with sentence-transformers and
  OpenAI-compatible adapters; `_spaces` — one embedding model per index.
"""

from .._cache import user_memory_tag
from ._base import (
    CATEGORIES,
    InMemoryMemoryStore,
    Memory,
    MemoryHit,
    MemoryStore,
    Scope,
)
from ._embed import (
    Embedder,
    OpenAICompatibleEmbedder,
    SentenceTransformerEmbedder,
    bundled_minilm_path,
    normalize_rows,
)
from ._extract import KINDS, Extracted, Extractor, LLMExtractor, RuleExtractor, dedupe_key
from ._search import SearchWeights, VectorIndex
from ._sqlite import SQLiteMemoryStore
from ._writer import MemoryWriter, MemoryWriterStore, WriterStats, invalidate_user_memory

__all__ = [
    "CATEGORIES",
    "KINDS",
    "Embedder",
    "Extracted",
    "Extractor",
    "InMemoryMemoryStore",
    "LLMExtractor",
    "Memory",
    "MemoryHit",
    "MemoryStore",
    "MemoryWriter",
    "MemoryWriterStore",
    "OpenAICompatibleEmbedder",
    "RuleExtractor",
    "SQLiteMemoryStore",
    "Scope",
    "SearchWeights",
    "SentenceTransformerEmbedder",
    "VectorIndex",
    "WriterStats",
    "bundled_minilm_path",
    "dedupe_key",
    "invalidate_user_memory",
    "normalize_rows",
    "user_memory_tag",
]
