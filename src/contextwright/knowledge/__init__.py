"""Knowledge: documents → chunks → the hybrid index, for retrieved knowledge.

    store = SQLiteKnowledgeStore("chat.db", tenant="acme")   # the conversations' file
    store.ingest_file("docs/ttps.md")                        # headings → paragraphs → chunks
    store.add("When the user says 'I'm still thinking', ask what holds them back.",
              source="exp-17", category="experience")
    store.retrieve_for_prompt("TTPS requirements", 400, locale="zh")
    # 来源:ttps.md › 申请条件 (相似度: 0.92)
    # > …

This package is the knowledge part's public face. The pieces live where the
layering puts them: `Passage`, `KnowledgeHit`, the async `KnowledgeStore` protocol
and `InMemoryKnowledgeStore` in `stores/_knowledge.py`; `SQLiteKnowledgeStore`
and `KnowledgeView` in `stores/sqlite/`; `PostgresKnowledgeStore` in
`stores/postgres/` (imported on first use; `open_knowledge_store` picks the
backend by path or URL); `chunk_document` in `text/_chunk.py`;
`render_passages` (passages as prompt text under a token budget) in
`stores/_knowledge_render.py`.
"""

from ..stores._knowledge import InMemoryKnowledgeStore, KnowledgeHit, KnowledgeStore, Passage
from ..stores._knowledge_render import render_passages
from ..stores._open import open_knowledge_store
from ..stores.sqlite._knowledge import KnowledgeView, SQLiteKnowledgeStore
from ..text._chunk import Chunk, chunk_document

__all__ = [
    "Chunk",
    "InMemoryKnowledgeStore",
    "KnowledgeHit",
    "KnowledgeStore",
    "KnowledgeView",
    "Passage",
    "PostgresKnowledgeStore",
    "SQLiteKnowledgeStore",
    "chunk_document",
    "open_knowledge_store",
    "render_passages",
]


def __getattr__(name: str) -> object:
    # PostgresKnowledgeStore on first use (see contextwright.memory).
    if name == "PostgresKnowledgeStore":
        from ..stores.postgres._knowledge import PostgresKnowledgeStore

        return PostgresKnowledgeStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
