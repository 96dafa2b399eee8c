"""contextwright: decides what goes into an LLM prompt under a token budget, and shows its work.

    from contextwright import ContextEngine, Message

    engine = ContextEngine(system_prompt="You are helpful.", model="gpt-4o", budget=8000)
    built = engine.build_sync("What did we decide?", history=messages)
    request = built.render("anthropic")   # or "openai", "responses"
    print(built.report.to_json())

Stateful use keeps conversations in a store (SQLite by default) and builds by id:

    convs = Conversations(engine, "chat.db")
    built = await convs.build("conversation-1", "And the budget?", user="u1")

The public API is re-exported here once; implementation lives in private modules,
one per part of the design (messages, tokens, budget, blocks, cache, sources, …);
`contextwright.sources`, `.adapters`, `.history`, `.memory`, `.knowledge`, `.stores`
and `.llm` hold the parts' own APIs.
"""

from ._errors import (
    BudgetError,
    ConfigError,
    ContextwrightError,
    InvalidMessageError,
    LLMError,
    MissingDependencyError,
    ProviderRuleError,
    SchemaError,
    StoreError,
    StoreUnavailableError,
    SummaryConflictError,
    UserError,
)
from .budget._budget import (
    DEFAULT_SHARES,
    MODELS,
    Budget,
    BudgetTracker,
    ModelInfo,
    model_info,
    share_out,
)
from .history._window import WindowResult, select_window
from .interfaces.eval._locomo import evaluate_locomo, memory_qa_engine
from .knowledge import InMemoryKnowledgeStore, KnowledgeHit, KnowledgeStore, Passage
from .memory import InMemoryMemoryStore, Memory, MemoryHit, MemoryStore, Scope
from .model._blocks import Block, Priority, escape_content, render_block, unescape_content
from .model._messages import Message
from .model._parts import ImagePart, TextPart, ToolCallPart, ToolResultPart
from .model._units import Unit, group_units
from .pipeline._engine import ContextEngine
from .pipeline._receipt import BlockReport, BuiltContext, ContextReport, SectionReport
from .service import (
    Conversations,
    MemoryFlush,
    MemoryWriter,
    MemoryWriterStore,
    WriterStats,
    invalidate_user_memory,
)
from .stores._cache import Cache, CacheStats, MemoryCache, cache_namespace, user_memory_tag
from .tokens._count import CachedCounter, HeuristicCounter, TokenCounter
from .tokens._exact import HFTokenizerCounter, TiktokenCounter, default_counter
from .tokens._frame import MessageOverhead, count_message, count_messages
from .tokens._truncate import truncate_to_tokens

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_SHARES",
    "MODELS",
    "Block",
    "BlockReport",
    "Budget",
    "BudgetError",
    "BudgetTracker",
    "BuiltContext",
    "Cache",
    "CacheStats",
    "CachedCounter",
    "ConfigError",
    "ContextEngine",
    "ContextReport",
    "ContextwrightError",
    "Conversations",
    "HFTokenizerCounter",
    "HeuristicCounter",
    "ImagePart",
    "InMemoryKnowledgeStore",
    "InMemoryMemoryStore",
    "InvalidMessageError",
    "KnowledgeHit",
    "KnowledgeStore",
    "LLMError",
    "Memory",
    "MemoryCache",
    "MemoryFlush",
    "MemoryHit",
    "MemoryStore",
    "MemoryWriter",
    "MemoryWriterStore",
    "Message",
    "MessageOverhead",
    "MissingDependencyError",
    "ModelInfo",
    "Passage",
    "Priority",
    "ProviderRuleError",
    "SchemaError",
    "Scope",
    "SectionReport",
    "StoreError",
    "StoreUnavailableError",
    "SummaryConflictError",
    "TextPart",
    "TiktokenCounter",
    "TokenCounter",
    "ToolCallPart",
    "ToolResultPart",
    "Unit",
    "UserError",
    "WindowResult",
    "WriterStats",
    "__version__",
    "cache_namespace",
    "count_message",
    "count_messages",
    "default_counter",
    "escape_content",
    "evaluate_locomo",
    "group_units",
    "invalidate_user_memory",
    "memory_qa_engine",
    "model_info",
    "render_block",
    "select_window",
    "share_out",
    "truncate_to_tokens",
    "unescape_content",
    "user_memory_tag",
]
