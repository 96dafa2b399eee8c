"""The repository stands alone: no source file cites a document that is not in it.

Comments and docstrings give their reasons inline or cite docs/design-notes.md,
docs/architecture.md or a public source; a citation of an outside design document
("DESIGN.md", "../shared", "seed 004 §2") or of a tracker item ("issue 3") leaves a
reader with nothing to follow.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = {".py", ".md", ".json", ".txt"}

DANGLING = re.compile(
    r"DESIGN\.md"
    r"|\.\./shared"
    r"|\bseeds?(?:'s)?\s+(?:documents?\s+)?#?\d+"  # seed 000, Seed 4, seed document 004
    r"|\bthe\s+seed's\b"
    r"|\bissues?\s+#?\d+",  # issue 3, issue #18
    re.IGNORECASE,
)


def _files() -> list[Path]:
    src = [p for p in (ROOT / "src").rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES]
    docs = sorted((ROOT / "docs").glob("*.md"))
    return sorted(src) + docs


def _dangling(text: str) -> list[tuple[int, str]]:
    """(line number, match) of each citation; a citation may span a line break."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(0)) for m in DANGLING.finditer(text)]


@pytest.mark.parametrize(
    "text",
    [
        "see DESIGN.md, Layering",
        "read from ../shared/data",
        "(seed 000 §2)",
        "Seed 004's compaction settings",
        "seed document 004",
        "the seed's three levels",
        "and of 100,000 (issue 3):",
        "fixed in Issue #18",
        "the presets, plus seed\n002's summary triggers",
    ],
)
def test_the_pattern_catches_each_kind_of_dangling_citation(text: str) -> None:
    assert _dangling(text)


@pytest.mark.parametrize(
    "text",
    [
        'the OpenAI parameter "seed"',
        "random.Random(seed)",
        "seeded synthetic thread",
        "see docs/design-notes.md, Compaction",
        "an issue with 3 parts",
    ],
)
def test_the_pattern_leaves_ordinary_words_alone(text: str) -> None:
    assert not _dangling(text)


def test_the_scan_covers_the_package_and_the_docs() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in _files()}
    assert "src/contextwright/pipeline/_engine.py" in names
    assert "src/contextwright/data/demo_conversation.json" in names
    assert "docs/design-notes.md" in names
    assert not any(n.endswith(".gz") for n in names)


def test_no_file_cites_a_document_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {hit!r}"
        for path in _files()
        for n, hit in _dangling(path.read_text(encoding="utf-8"))
    ]
    assert not found, "dangling citations:\n" + "\n".join(found)
