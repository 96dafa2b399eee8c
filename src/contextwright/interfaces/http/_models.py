"""The service's request and response bodies, as pydantic models (the OpenAPI document's schemas).

Requests refuse unknown fields (``extra="forbid"``): a misspelt option is a 422,
not silently ignored. Responses mirror what `Host` returns; the receipt mirrors
`ContextReport.to_dict` and allows fields a newer library adds.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict

__all__ = [
    "AddMemory",
    "AppendMessages",
    "Appended",
    "BuildContext",
    "Built",
    "Compact",
    "CompactResult",
    "CompactionList",
    "Conversation",
    "ConversationList",
    "CreateConversation",
    "Created",
    "Deleted",
    "Ingest",
    "Ingested",
    "KnowledgeHits",
    "MemoryHits",
    "MemoryList",
    "MemoryModel",
    "MessagesPage",
    "Problem",
    "ReadBack",
    "Recall",
    "RecallHits",
    "ReceiptList",
    "SearchKnowledge",
    "SearchMemory",
    "Status",
    "SummaryView",
]

Id = Field(min_length=1, max_length=200)


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


# 0 is not false, nor "yes" true: a client that sends them has a bug to hear about
Flag = Annotated[bool, Strict()]


# -- requests ------------------------------------------------------------------------------


class CreateConversation(_Request):
    id: str | None = Field(
        None, min_length=1, max_length=200, pattern=r"^[^/]+$",
        description="the conversation's id (no '/': it goes in paths); a new one if absent",
    )  # fmt: skip
    user: str = Field("anonymous", min_length=1, max_length=200)
    metadata: dict[str, Any] = Field(default_factory=dict)


class AppendMessages(_Request):
    messages: list[dict[str, Any]] = Field(
        min_length=1,
        description="OpenAI Chat, OpenAI Responses or Anthropic messages (auto-detected); "
        'an item\'s "id" is its client message id: sent again, it is stored once',
    )
    user: str | None = Field(None, min_length=1, max_length=200)


class BuildContext(_Request):
    message: str = Field(min_length=1, description="the new user message")
    budget: int | None = Field(None, gt=0, description="input tokens (default: the server's)")
    format: Literal["openai", "anthropic", "responses"] = "openai"
    model: str | None = Field(None, min_length=1, max_length=200)
    user: str | None = Field(None, min_length=1, max_length=200)
    store_message: Flag = True


class Compact(_Request):
    preview: Flag = Field(False, description="compute what it would do; change nothing")


class Recall(_Request):
    query: str = Field(min_length=1)
    limit: int = Field(5, ge=1, le=100)


class AddMemory(_Request):
    user: str = Field("anonymous", min_length=1, max_length=200)
    content: str = Field(min_length=1)
    category: str = Field("fact", pattern=r"^[a-z][a-z0-9_\-]{0,39}$")
    importance: int = Field(50, ge=0, le=100)
    key: str | None = Field(None, description="a live memory of the same key is superseded")
    namespace: str = ""
    source_message_ids: list[str] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict)


class SearchMemory(_Request):
    user: str = Field("anonymous", min_length=1, max_length=200)
    query: str = Field(min_length=1)
    limit: int = Field(5, ge=1, le=100)
    namespace: str = ""


class Ingest(_Request):
    text: str = Field(min_length=1)
    source: str = Field(
        min_length=1, max_length=500, description="re-ingesting a source replaces it"
    )
    format: Literal["markdown", "text"] = "markdown"
    category: str = Field("", max_length=64)
    meta: dict[str, Any] = Field(default_factory=dict)


class SearchKnowledge(_Request):
    query: str = Field(min_length=1)
    limit: int = Field(5, ge=1, le=100)


# -- responses -----------------------------------------------------------------------------


class Status(BaseModel):
    status: str


class Problem(BaseModel):
    """RFC 9457 problem details (``application/problem+json``)."""

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    field: str | None = Field(None, description="the field at fault, when one is")


class Conversation(BaseModel):
    id: str
    user: str
    created_at: float
    updated_at: float
    last_seq: int
    message_count: int
    token_total: int
    metadata: dict[str, Any]
    version: int


class Created(Conversation):
    created: bool


class ConversationList(BaseModel):
    conversations: list[Conversation]


class StoredRef(BaseModel):
    id: str
    seq: int | None
    role: str


class Appended(BaseModel):
    conversation: str
    messages: list[StoredRef]
    last_seq: int | None


class BlockView(BaseModel):
    name: str
    source: str
    section: str
    priority: int
    status: str
    tokens: int
    reason: str
    cached: bool
    original_tokens: int | None = None
    fetch_ms: float | None = None


class SectionView(BaseModel):
    share: float
    allotted: int
    used: int


class PrefixView(BaseModel):
    """The prompt cache: this request against the previous build's (`PrefixReport`)."""

    cacheable_tokens: int
    cached_tokens: int
    write_tokens: int
    least_write_tokens: int
    known: bool
    changed: str


class Receipt(BaseModel):
    """The context receipt (`ContextReport.to_dict`): what the build included, cut, dropped, why."""

    model_config = ConfigDict(extra="allow")

    budget: int
    used: int
    counter: str
    exact: bool
    blocks: list[BlockView]
    sections: dict[str, SectionView]
    protected_tokens: int
    history_messages: int
    history_units: int
    history_considered: int
    history_total: int
    history_shortened: int
    history_stopped: str
    cache_hits: int
    cache_misses: int
    cache_unavailable: str | None = None
    timings_ms: dict[str, float]
    warnings: list[str]
    compaction: dict[str, Any] | None = None
    last_seq: int | None = None
    prefix: PrefixView | None = None
    utilisation: float


class Built(BaseModel):
    request: dict[str, Any] = Field(description="the provider request body (messages etc.)")
    receipt: Receipt


class MessagesPage(BaseModel):
    messages: list[dict[str, Any]] = Field(description="stored originals (Message.to_dict)")
    next_after_seq: int | None = Field(description="pass as after_seq for the next page")


class CompactResult(BaseModel):
    preview: bool
    applied: bool
    urgency: str
    strategies: list[str]
    original_count: int
    retained_count: int
    flushed_memories: int
    tokens_before: int
    tokens_after: int
    summary_version: int | None
    upto_seq: int | None
    method: str
    notes: list[str]
    summary: str


class SummaryModel(BaseModel):
    version: int
    from_seq: int
    upto_seq: int
    content: str
    tokens: int
    method: str
    created_at: float


class Coverage(BaseModel):
    upto_seq: int
    last_seq: int
    messages_after: int


class SummaryView(BaseModel):
    summary: SummaryModel | None
    coverage: Coverage


class CompactionModel(BaseModel):
    id: int
    at: float
    urgency: str
    applied: bool
    tokens_before: int
    tokens_after: int
    summary_version: int | None
    upto_seq: int
    strategies: list[str]
    notes: list[str]


class CompactionList(BaseModel):
    compactions: list[CompactionModel]


class ReadBack(BaseModel):
    key: str
    page: int
    text: str


class ReceiptItem(BaseModel):
    id: int
    at: float
    receipt: Receipt


class ReceiptList(BaseModel):
    receipts: list[ReceiptItem]


class RecallHit(BaseModel):
    seq: int | None
    id: str
    role: str
    text: str
    score: float


class RecallHits(BaseModel):
    hits: list[RecallHit]


class MemoryModel(BaseModel):
    id: str
    user: str
    namespace: str
    content: str
    category: str
    importance: int
    key: str | None
    created_at: float
    updated_at: float | None
    source_message_ids: list[str]
    superseded_by: str | None
    superseded_at: float | None
    active: bool
    meta: dict[str, Any]


class MemoryList(BaseModel):
    memories: list[MemoryModel]


class MemoryHit(BaseModel):
    memory: MemoryModel
    score: float
    relevance: float | None


class MemoryHits(BaseModel):
    hits: list[MemoryHit]


class Deleted(BaseModel):
    id: str
    deleted: bool


class Ingested(BaseModel):
    source: str
    chunks: int


class KnowledgeHit(BaseModel):
    source: str
    title: str
    content: str
    category: str
    score: float


class KnowledgeHits(BaseModel):
    hits: list[KnowledgeHit]
