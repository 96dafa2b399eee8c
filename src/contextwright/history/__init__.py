"""History: what the conversation contributes to the prompt beyond the current message.

This package owns the history part (docs/architecture.md): the incremental thread summary
(`_summary`: `Summarizer`, `RuleSummarizer`, `LLMSummarizer`,
`ProviderCompactor`; `_summary_format`: the
rule summary's text format), and — added alongside them — the sliding window over
tool-call units, compaction (soft, hard, emergency), cache-aware clearing
(`_clearing`) and tool-result compression with working-memory offload. Each lives
in its own private module and is re-exported here, one import block per module.
"""

from ._clearing import clearing_cut
from ._compaction import (
    PRESETS,
    CompactionCheck,
    CompactionConfig,
    CompactionPlan,
    CompactionResult,
    Urgency,
    check,
    plan_compaction,
    summary_boundary,
)
from ._rank import IndexedTurn, QueryAnalysis, RankWeights, TurnIndex, TurnRanker, analyse
from ._recall import MEMORY_QA_SHARES, RecallSource, SearchesMessages
from ._summary import OutlineSummarizer, RuleSummarizer, Summarizer, SummaryDraft
from ._summary_format import RuleSummary, detect_locale
from ._summary_llm import LLMSummarizer
from ._summary_provider import CompactsConversations, ProviderCompactor
from ._task import ActiveTask, ActiveTaskSource, ActiveTaskTracker, TaskStatus, TaskStep
from ._tools import (
    READBACK_TOOL,
    Compression,
    ToolPolicy,
    ToolResultCompressor,
    readback_page,
    readback_tool,
)

__all__ = [
    "MEMORY_QA_SHARES",
    "PRESETS",
    "READBACK_TOOL",
    "ActiveTask",
    "ActiveTaskSource",
    "ActiveTaskTracker",
    "CompactionCheck",
    "CompactionConfig",
    "CompactionPlan",
    "CompactionResult",
    "CompactsConversations",
    "Compression",
    "IndexedTurn",
    "LLMSummarizer",
    "OutlineSummarizer",
    "ProviderCompactor",
    "QueryAnalysis",
    "RankWeights",
    "RecallSource",
    "RuleSummarizer",
    "RuleSummary",
    "SearchesMessages",
    "Summarizer",
    "SummaryDraft",
    "TaskStatus",
    "TaskStep",
    "ToolPolicy",
    "ToolResultCompressor",
    "TurnIndex",
    "TurnRanker",
    "Urgency",
    "analyse",
    "check",
    "clearing_cut",
    "detect_locale",
    "plan_compaction",
    "readback_page",
    "readback_tool",
    "summary_boundary",
]
