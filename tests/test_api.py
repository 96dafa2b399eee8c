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
        "ContextReport", "ContextwrightError", "Conversations", "LLMError", "MemoryFlush", "StoreError",
        "StoreUnavailableError",
        "SchemaError", "HFTokenizerCounter", "HeuristicCounter", "ImagePart",
        "InMemoryKnowledgeStore", "InMemoryMemoryStore", "InvalidMessageError", "KnowledgeHit",
        "KnowledgeStore", "Memory", "MemoryCache", "MemoryHit", "MemoryStore", "MemoryWriter", "MemoryWriterStore", "Message",
        "MessageOverhead", "MissingDependencyError", "ModelInfo", "Passage", "Priority",
        "ProviderRuleError", "Scope", "SectionReport", "SummaryConflictError", "TextPart", "TiktokenCounter", "TokenCounter",
        "ToolCallPart", "ToolResultPart", "Unit", "UserError", "WindowResult", "__version__",
        "cache_namespace", "count_message", "count_messages", "default_counter", "escape_content", "evaluate_locomo", "group_units",
        "memory_qa_engine", "model_info", "render_block", "select_window", "share_out", "truncate_to_tokens",
        "unescape_content", "user_memory_tag", "WriterStats", "invalidate_user_memory",
    }  # fmt: skip


# docs/architecture.md, Layering: imports point one way, from the interfaces down to
# the message model. Parts on one floor may import each other, but not in a cycle.
FLOORS = {
    "model": 0, "_errors": 0, "_trace": 0, "data": 0,
    "budget": 1, "tokens": 1, "text": 1,
    "stores": 2, "llm": 2, "adapters": 2,
    "sources": 3, "history": 3, "memory": 3, "knowledge": 3,
    "pipeline": 4,
    "service": 5,
    "interfaces": 6, "integrations": 6,
    "__init__": 7, "__main__": 7, "testing": 7,
}  # fmt: skip


def _module(path: Path) -> str:
    rel = path.relative_to(PKG).with_suffix("")
    parts = ["contextwright", *rel.parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(module: str) -> bool:
    rel = Path(*module.split(".")[1:])
    return (PKG / rel).is_dir() or (PKG / rel).with_suffix(".py").is_file()


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> set[str]:
    """The contextwright modules (or packages) ``path`` imports, as absolute names."""
    me = _module(path)
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            if name.startswith("contextwright"):
                for alias in node.names:  # `from .. import adapters` imports the package
                    sub = f"{name}.{alias.name}"
                    found.add(sub if _exists(sub) else name)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("contextwright"))
    return found


def _part_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in PKG.rglob("*.py"):
        me = _part(_module(path))
        graph.setdefault(me, set()).update(p for p in map(_part, _imports(path)) if p != me)
    return graph


def test_every_part_has_a_floor():
    assert set(_part_graph()) <= set(FLOORS), set(_part_graph()) - set(FLOORS)


def test_imports_point_down():
    bad = []
    for path in PKG.rglob("*.py"):
        me = _part(_module(path))
        for target in map(_part, _imports(path)):
            if FLOORS[target] > FLOORS[me]:
                bad.append(f"{path.relative_to(PKG)} ({me}) imports {target}")
    assert not bad, bad


def test_no_import_cycle_between_parts():
    graph = _part_graph()
    seen: dict[str, int] = {}  # 1 on the path, 2 done

    def visit(part: str, path: list[str]) -> None:
        seen[part] = 1
        for nxt in sorted(graph.get(part, ())):
            assert seen.get(nxt) != 1, " -> ".join([*path, part, nxt])
            if nxt not in seen:
                visit(nxt, [*path, part])
        seen[part] = 2

    for part in sorted(graph):
        if part not in seen:
            visit(part, [])


def test_every_module_has_a_docstring():
    for path in PKG.rglob("*.py"):
        if path.parent.name == "data":
            continue
        tree = ast.parse(path.read_text())
        assert ast.get_docstring(tree), f"{path.relative_to(PKG)} has no module docstring"


def test_every_module_is_short():
    """Modules stay at about 500 lines (docs/architecture.md, The tree): a longer one is
    a part that wants splitting by concern."""
    long = {
        str(path.relative_to(PKG)): n
        for path in PKG.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > 520
    }
    assert not long, long
