"""Storage: conversations persisted behind one narrow contract.

`Store` is the contract the history part reads and writes through: append-only
messages with per-conversation sequence numbers and stored token counts, the
tail of a conversation under a token budget, outlines of stored messages (what a
compaction plans from, without decoding them), versioned summaries, a compaction
log, a short-lived working memory, pinned items, and full-text search over old
turns in English and Chinese — every call scoped by tenant. `SQLiteStore` is the
embedded default (one SQLite file, WAL, FTS5); `AsyncStore` runs any store on a
worker thread for async callers.

The async contract (`Backend`: `ConversationLog`, `SummaryLog`, `CompactionLog`,
`WorkingMemory`, `Pins`, `MessageSearch`) is what every backend provides:
`SQLiteBackend` over one file, `contextwright.testing.MemoryBackend` in memory.
Each conversation carries a version that every write moves by one (`Written`).
`Jobs` is the durable queue of background work (`SQLiteJobs` in the same
file, `MemoryJobs` in process). `Receipts` (build receipts) and `ApiKeys`
(hashed, revocable keys) serve the HTTP service. The records it returns are
frozen dataclasses. Compaction never deletes a message: summaries replace old
turns in the prompt, the originals stay stored and searchable; only
`ConversationLog.delete_conversation` removes them, with everything else of
the conversation (a user's request to be forgotten).

    store = SQLiteStore(default_db_path())
    saved = store.append("c1", [Message.user("我今年35岁，在上海工作")], tenant="t", user="u")
    store.search("c1", "上海", tenant="t")[0].message == saved[0]
"""

from ._async import AsyncStore
from ._contract import (
    ApiKeys,
    Backend,
    CompactionLog,
    ConversationLog,
    MessageSearch,
    Pins,
    Readback,
    Receipts,
    SummaryLog,
    WorkingMemory,
    Written,
)
from ._jobs import Job, Jobs, MemoryJobs
from ._records import (
    CompactionEntry,
    ConversationInfo,
    KeyRecord,
    MessageOutline,
    PinnedItem,
    ReceiptRecord,
    SearchHit,
    Store,
    Summary,
    WorkingItem,
    default_db_path,
)
from .sqlite._backend import SQLiteBackend
from .sqlite._jobs import SQLiteJobs
from .sqlite._migrations import MIGRATIONS, Migration, apply_migrations, migration
from .sqlite._store import SQLiteStore

__all__ = [
    "MIGRATIONS",
    "ApiKeys",
    "AsyncStore",
    "Backend",
    "CompactionEntry",
    "CompactionLog",
    "ConversationInfo",
    "ConversationLog",
    "Job",
    "Jobs",
    "KeyRecord",
    "MemoryJobs",
    "MessageOutline",
    "MessageSearch",
    "Migration",
    "PinnedItem",
    "Pins",
    "Readback",
    "ReceiptRecord",
    "Receipts",
    "SQLiteBackend",
    "SQLiteJobs",
    "SQLiteStore",
    "SearchHit",
    "Store",
    "Summary",
    "SummaryLog",
    "WorkingItem",
    "WorkingMemory",
    "Written",
    "apply_migrations",
    "default_db_path",
    "migration",
]
