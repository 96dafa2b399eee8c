"""History: what the conversation contributes to the prompt beyond the current message.

This package owns the history part of DESIGN.md: the incremental thread summary
(`_summary`: `Summarizer`, `RuleSummarizer`, `LLMSummarizer`; `_summary_format`: the
rule summary's text format), and — added alongside them — the sliding window over
tool-call units, compaction (soft, hard, emergency) and tool-result compression with
working-memory offload. Each lives in its own private module and is re-exported
here, one import block per module.
"""

from ._summary import LLMSummarizer, RuleSummarizer, Summarizer, SummaryDraft
from ._summary_format import RuleSummary, detect_locale

__all__ = [
    "LLMSummarizer",
    "RuleSummarizer",
    "RuleSummary",
    "Summarizer",
    "SummaryDraft",
    "detect_locale",
]
