"""Long-term memory: scoped records, hybrid search, embeddings (see docs/architecture.md).

    store = SQLiteMemoryStore("chat.db")                  # the conversations' file
    scope = Scope("acme", "u1")
    store.add(scope, "我在上海工作", category="fact", importance=80, key="city")
    store.search_sync(scope, "上海")[0].memory.content    # '我在上海工作'
    await store.search(scope, "where does she work?", 3)  # the MemoryStore protocol

This package is the memory part's public face and its own logic, extraction: what a
conversation says about the user, by rules (`_extract`, with the tables in `_rules_en`
and `_rules_zh`) or by a model (`_extract_llm`), as `Extracted` records (`_extracted`).
The rest lives where the layering puts it: the records and the async
`MemoryStore` protocol in `stores/_memory.py`, `SQLiteMemoryStore` in
`stores/sqlite/`, `PostgresMemoryStore` in `stores/postgres/` (imported on first
use, so importing this package never imports psycopg; `open_memory_store` picks
the backend by path or URL), the hybrid-search formulas in `text/`, the embedders in `llm/`,
and the background `MemoryWriter` in `service/` (exported by `contextwright`).
"""

from ..llm._embed import (
    Embedder,
    OpenAICompatibleEmbedder,
    SentenceTransformerEmbedder,
    bundled_minilm_path,
    normalize_rows,
)
from ..llm._embed_static import StaticEmbedder, auto_embedder, bundled_wordllama_path
from ..stores._cache import user_memory_tag
from ..stores._memory import CATEGORIES, InMemoryMemoryStore, Memory, MemoryHit, MemoryStore, Scope
from ..stores._open import open_memory_store
from ..stores.sqlite._memory import SQLiteMemoryStore
from ..text._scores import SearchWeights
from ..text._vectors import VectorIndex
from ._extract import KINDS, RuleExtractor
from ._extract_llm import LLMExtractor
from ._extracted import Extracted, Extractor, dedupe_key

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
    "OpenAICompatibleEmbedder",
    "PostgresMemoryStore",
    "RuleExtractor",
    "SQLiteMemoryStore",
    "Scope",
    "SearchWeights",
    "SentenceTransformerEmbedder",
    "StaticEmbedder",
    "VectorIndex",
    "auto_embedder",
    "bundled_minilm_path",
    "bundled_wordllama_path",
    "dedupe_key",
    "normalize_rows",
    "open_memory_store",
    "user_memory_tag",
]


def __getattr__(name: str) -> object:
    # PostgresMemoryStore on first use: its module needs no psycopg to import, but it
    # is only worth loading for a PostgreSQL URL.
    if name == "PostgresMemoryStore":
        from ..stores.postgres._memory import PostgresMemoryStore

        return PostgresMemoryStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
