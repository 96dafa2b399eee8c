"""The public surface: pinned, sorted, importable; and the layering of docs/architecture.md."""

from __future__ import annotations

import ast
from pathlib import Path

import contextwright
import contextwright.sources

PKG = Path(contextwright.__file__).parent


def test_all_is_complete_and_unique():
    # ruff's RUF022 keeps __all__ sorted; this checks every name resolves, once.
    assert len(set(contextwright.__all__)) == len(contextwright.__all__)
    for name in contextwright.__all__:
        assert hasattr(contextwright, name), name
    for name in contextwright.sources.__all__:
        assert hasattr(contextwright.sources, name), name


def test_public_api_is_pinned():
    # Changing the public API is a decision: update this list and the CHANGELOG together.
    assert set(contextwright.__all__) == {
        "DEFAULT_SHARES", "MODELS", "Block", "BlockReport", "Budget", "BudgetError", "BudgetTracker",
        "BuiltContext", "Cache", "CacheStats", "CachedCounter", "ConfigError", "ContextEngine",
        "ContextReport", "ContextwrightError", "Conversations", "LLMError", "MemoryFlush", "StoreError", "HFTokenizerCounter", "HeuristicCounter", "ImagePart",
        "InMemoryKnowledgeStore", "InMemoryMemoryStore", "InvalidMessageError", "KnowledgeHit",
        "KnowledgeStore", "Memory", "MemoryCache", "MemoryHit", "MemoryStore", "Message",
        "MessageOverhead", "MissingDependencyError", "ModelInfo", "Passage", "Priority",
        "ProviderRuleError", "Scope", "SectionReport", "SummaryConflictError", "TextPart", "TiktokenCounter", "TokenCounter",
        "ToolCallPart", "ToolResultPart", "Unit", "UserError", "WindowResult", "__version__",
        "cache_namespace", "count_message", "count_messages", "default_counter", "escape_content", "evaluate_locomo", "group_units",
        "memory_qa_engine", "model_info", "render_block", "select_window", "share_out", "truncate_to_tokens",
        "unescape_content", "user_memory_tag",
    }  # fmt: skip


# docs/architecture.md: imports point one way, from the interfaces down.
LAYERS = {
    "_messages": 0, "_cache": 0, "_errors": 0, "_lexical": 0, "_heuristic": 0, "_eager": 0,
    "_shutdown": 0,
    "_tokens": 1, "adapters": 1, "storage": 1, "llm": 1,
    "_blocks": 2, "_budget": 2, "memory": 2, "knowledge": 2, "_fit": 2,
    "sources": 3, "_window": 3, "history": 3,
    "_receipt": 4, "_fetch": 4, "_engine": 4, "_conversations": 4, "_stateful": 4,
    "_stateful_compact": 4,
    "cli": 5, "data": 5, "_files": 5, "_cli_history": 5, "_eval": 5, "testing": 5,
}  # fmt: skip


def _part(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def test_imports_point_down():
    bad = []
    for path in PKG.rglob("*.py"):
        if path.name == "__init__.py" and path.parent == PKG:
            continue
        me = _part(path)
        level = LAYERS[me]
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level > 0 and node.module is not None:
                target = node.module.split(".")[0]
                if target in LAYERS and target != me and LAYERS[target] > level:
                    # the receipt renders through the adapters, which sit lower: fine
                    bad.append(f"{path.relative_to(PKG)} imports {target}")
    assert not bad, bad


def test_every_module_has_a_docstring():
    for path in PKG.rglob("*.py"):
        if path.parent.name == "data":
            continue
        tree = ast.parse(path.read_text())
        assert ast.get_docstring(tree), f"{path.relative_to(PKG)} has no module docstring"
