"""Knowledge: documents → chunks → the hybrid index, for retrieved knowledge.

    store = SQLiteKnowledgeStore("chat.db", tenant="acme")   # the conversations' file
    store.ingest_file("docs/ttps.md")                        # headings → paragraphs → chunks
    store.add("When the user says 'I'm still thinking', ask what holds them back.",
              source="exp-17", category="experience")
    store.retrieve_for_prompt("TTPS requirements", 400, locale="zh")
    # 来源:ttps.md › 申请条件 (相似度: 0.92)
    # > …

- `_base` — `Passage`, `KnowledgeHit`, the async `KnowledgeStore` protocol the
  knowledge and experience sources read through, `InMemoryKnowledgeStore`;
- `_ingest` — `chunk_document` and `Chunk`;
- `_sqlite` — `SQLiteKnowledgeStore` (per tenant, hybrid search, experiences with
  an active flag) and `KnowledgeView`;
- `_render` — passages as prompt text under a token budget (``Source: … (similarity: …)``).
"""

from ._base import InMemoryKnowledgeStore, KnowledgeHit, KnowledgeStore, Passage
from ._ingest import Chunk, chunk_document
from ._render import render_passages
from ._sqlite import KnowledgeView, SQLiteKnowledgeStore

__all__ = [
    "Chunk",
    "InMemoryKnowledgeStore",
    "KnowledgeHit",
    "KnowledgeStore",
    "KnowledgeView",
    "Passage",
    "SQLiteKnowledgeStore",
    "chunk_document",
    "render_passages",
]
