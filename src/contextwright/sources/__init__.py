"""Sources: what fills the budget besides the history.

The `Source` contract, the triggers that decide when one applies, the turn and
state a source reads, the English and Chinese templates, the built-in sources,
the general `default_sources` and the opt-in `consultation_sources` preset.
"""

from ._base import (
    FetchResult,
    Source,
    SourceBase,
    Trigger,
    all_of,
    always,
    any_of,
    every_n_turns,
    first_turn,
    keywords,
    predicate,
    regex,
    stage,
)
from ._builtin import (
    AgentHistorySource,
    AssessmentSource,
    CollectedInfoSource,
    ConversationStatsSource,
    DeviceContextSource,
    RelevantKnowledgeSource,
    SimilarExperiencesSource,
    UserMemorySource,
    consultation_sources,
    consultation_templates,
    default_sources,
)
from ._state import AgentCall, Assessment, ConversationState, DeviceInfo, StageVisit, Turn
from ._templates import TEMPLATES, templates_for

__all__ = [
    "TEMPLATES",
    "AgentCall",
    "AgentHistorySource",
    "Assessment",
    "AssessmentSource",
    "CollectedInfoSource",
    "ConversationState",
    "ConversationStatsSource",
    "DeviceContextSource",
    "DeviceInfo",
    "FetchResult",
    "RelevantKnowledgeSource",
    "SimilarExperiencesSource",
    "Source",
    "SourceBase",
    "StageVisit",
    "Trigger",
    "Turn",
    "UserMemorySource",
    "all_of",
    "always",
    "any_of",
    "consultation_sources",
    "consultation_templates",
    "default_sources",
    "every_n_turns",
    "first_turn",
    "keywords",
    "predicate",
    "regex",
    "stage",
    "templates_for",
]
