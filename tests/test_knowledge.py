"""Knowledge: chunking (headings, paragraphs, overlap, the token limit as a property),
the knowledge stores on every backend (SQLite, PostgreSQL: ``store_db``) (per tenant, re-ingest, experiences with an active flag), and
retrieve_for_prompt with source and similarity, within its budget."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from contextwright import ConfigError, ContextEngine, HeuristicCounter, InvalidMessageError
from contextwright.knowledge import (
    KnowledgeHit,
    KnowledgeStore,
    Passage,
    SQLiteKnowledgeStore,
    chunk_document,
    open_knowledge_store,
    render_passages,
)
from contextwright.memory import Scope, open_memory_store
from contextwright.sources import (
    ConversationState,
    RelevantKnowledgeSource,
    SimilarExperiencesSource,
)
from tests.store_backends import store_db

__all__ = ["store_db"]  # the fixture, imported for pytest

COUNTER = HeuristicCounter()

GUIDE = """# 高才通计划申请指南

Intro: what the Top Talent Pass Scheme is.

## 申请条件

高才通计划(TTPS)B类要求申请人须持有全球百强大学颁授的学士学位,
并在申请前五年内累积至少三年工作经验。

## Fees

The application fee is HK$230 per applicant.

### Refunds

Fees are not refundable once the application is submitted.

```bash
# not a heading: code
pay --amount 230
```

Setext section
--------------

Text under a setext heading.
"""


# -- chunking -------------------------------------------------------------------------------------


def test_chunks_know_their_headings_and_source():
    chunks = chunk_document(GUIDE, source="guide.md")
    paths = [c.heading_path for c in chunks]
    assert paths == [
        ("高才通计划申请指南",),
        ("高才通计划申请指南", "申请条件"),
        ("高才通计划申请指南", "Fees"),
        ("高才通计划申请指南", "Fees", "Refunds"),
        ("高才通计划申请指南", "Setext section"),
    ]
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert all(c.source == "guide.md" for c in chunks)
    refunds = chunks[3].content
    assert "# not a heading: code" in refunds
    assert refunds.endswith("```")
    assert chunks[1].meta["line"] == 7
    assert "申请人须持有全球百强大学颁授的学士学位" in chunks[1].content


def test_plain_text_has_no_headings():
    chunks = chunk_document(
        "# not a heading\n\nsecond paragraph", source="notes.txt", format="text"
    )
    assert [(c.heading_path, c.content) for c in chunks] == [
        ((), "# not a heading\n\nsecond paragraph")
    ]


def test_long_sections_split_by_paragraph_then_sentence_with_overlap():
    sentences = [f"Sentence {i} is about visas, degrees and work experience." for i in range(40)]
    text = "## Long\n\n" + " ".join(sentences[:20]) + "\n\n" + " ".join(sentences[20:])
    chunks = chunk_document(text, source="s", max_tokens=60, overlap_tokens=15)
    assert len(chunks) > 4
    assert all(COUNTER.count(c.content) <= 60 for c in chunks)
    for before, after in itertools.pairwise(chunks):
        # the next chunk starts with the end of the previous one (a whole sentence here)
        first = re.split(r"(?<=\.)\s+", after.content)[0]
        assert before.content.rstrip().endswith(first)
        assert after.meta["overlap_units"] >= 1
    joined = " ".join(c.content for c in chunks)
    assert all(s in joined for s in sentences)  # nothing lost


def test_no_overlap_across_sections_or_when_disabled():
    text = "## A\n\n" + "alpha beta gamma delta. " * 40 + "\n\n## B\n\nsecond section."
    chunks = chunk_document(text, source="s", max_tokens=40, overlap_tokens=0)
    assert all(c.meta["overlap_units"] == 0 for c in chunks)
    assert chunks[-1].content == "second section."
    assert chunks[-1].heading_path == ("B",)


def test_overlong_words_and_cjk_runs_are_cut():
    url = "https://example.com/" + "x" * 3000
    zh = "申请人须持有全球百强大学颁授的学士学位" * 40  # no sentence end at all
    for text in (url, zh):
        chunks = chunk_document(text, source="s", max_tokens=50, overlap_tokens=10)
        assert len(chunks) > 1
        assert all(0 < COUNTER.count(c.content) <= 50 for c in chunks)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"source": ""},
        {"format": "html"},
        {"max_tokens": 4},
        {"max_tokens": 100, "overlap_tokens": 60},
        {"overlap_tokens": -1},
    ],
)
def test_chunking_settings_are_checked(kwargs):
    with pytest.raises(ConfigError):
        chunk_document("text", **{"source": "s", **kwargs})
    with pytest.raises(InvalidMessageError):
        chunk_document(None, source="s")  # type: ignore[arg-type]


PIECES = st.sampled_from(
    ["word", "visa", "申请", "条件。", "Sentence ends here.", "\n\n", "\n", "# Title\n", "## Sub\n",
     "```\ncode # x\n```\n", "https://example.com/" + "y" * 120, "！", "   ", "é", "emoji 👩‍💻"]
)  # fmt: skip


def test_a_word_cut_for_length_is_not_rejoined_with_a_space():
    # Found by the property test below in a CI run: "https://ex" | "ample.com/…" came
    # back as "https://ex ample.com/…" in the next chunk, after its overlap.
    text = "word word word emoji 👩\u200d💻 https://example.com/" + "y" * 120
    chunks = chunk_document(text, source="doc", format="markdown", max_tokens=20, overlap_tokens=8)
    assert any("https://example.com/" in c.content for c in chunks)
    assert "".join(c.content for c in chunks).count(" ") <= text.count(" ") + len(chunks)
    assert all(" ample" not in c.content and "y y" not in c.content for c in chunks)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(PIECES, min_size=1, max_size=120).map(" ".join),
    st.integers(16, 200),
    st.floats(0, 0.5),
    st.sampled_from(["markdown", "text"]),
)
# found by this property under load: a run measured with its leading space counted
# one token less than the same run stripped, as it was emitted
@example("条件。 ```\ncode # x\n```\n ```\ncode # x\n```\n word", 16, 0.0, "markdown")
def test_every_chunk_fits_max_tokens(text, max_tokens, overlap_share, fmt):
    overlap = int(max_tokens * overlap_share)
    chunks = chunk_document(
        text, source="doc", format=fmt, max_tokens=max_tokens, overlap_tokens=overlap
    )
    assert all(COUNTER.count(c.content) <= max_tokens for c in chunks)
    assert all(c.content.strip() and c.source == "doc" for c in chunks)
    assert [c.index for c in chunks] == list(range(len(chunks)))
    words = {w for w in re.findall(r"[A-Za-z]{3,}", text) if len(w) < 12} - {"Title", "Sub"}
    found = " ".join(c.content for c in chunks)
    assert all(w in found for w in words)  # no text is lost (headings aside)


# -- the store ------------------------------------------------------------------------------------


@pytest.fixture
def store(store_db):
    with open_knowledge_store(store_db, tenant="acme") as s:
        yield s


def test_ingest_and_search_in_english_and_chinese(store):
    assert store.ingest(GUIDE, source="高才通计划申请指南") == 5
    hits = store.search_sync("高才通 申请条件 学士学位")
    assert hits[0].passage.heading_path[-1] == "申请条件"
    assert hits[0].passage.title == "高才通计划申请指南 › 申请条件"  # the title repeats no source
    assert (
        store.search_sync("how much is the application fee?")[0].passage.heading_path[-1] == "Fees"
    )
    assert store.search_sync("refundable")[0].passage.heading_path[-1] == "Refunds"
    assert all(0.0 < h.score <= 1.0 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert store.search_sync("nothing like this at all") == []
    assert isinstance(store, KnowledgeStore)


def test_reingest_replaces_the_source(store):
    store.ingest("# A\n\nold text about llamas", source="a.md")
    store.ingest("# B\n\nunrelated", source="b.md")
    assert store.count() == 2
    store.ingest("# A\n\nnew text about alpacas\n\n## More\n\nand more", source="a.md")
    assert store.count() == 3
    assert store.sources() == ["a.md", "b.md"]
    assert store.search_sync("llamas") == []
    assert store.search_sync("alpacas")[0].passage.content == "new text about alpacas"
    assert store.remove("a.md") == 2
    assert store.search_sync("alpacas") == []
    assert store.count() == 1


def test_ingest_file(tmp_path, store):
    md = tmp_path / "faq.md"
    md.write_text("# FAQ\n\n## Visas\n\nA visa takes six weeks.", encoding="utf-8")
    txt = tmp_path / "notes.txt"
    txt.write_text("# plain\n\nvisa notes", encoding="utf-8")
    assert store.ingest_file(md) == 1
    assert store.ingest_file(txt) == 1
    hits = {h.passage.source: h.passage for h in store.search_sync("visa", limit=5)}
    assert hits["faq.md"].heading_path == ("FAQ", "Visas")
    assert hits["faq.md"].meta["path"] == str(md)
    assert hits["faq.md"].meta["format"] == "markdown"
    assert hits["notes.txt"].heading_path == ()
    with pytest.raises(ConfigError):
        store.ingest_file(tmp_path / "missing.md")


def test_knowledge_is_per_tenant_in_one_file(store_db):
    db = store_db
    with (
        open_knowledge_store(db, tenant="acme") as acme,
        open_knowledge_store(db, tenant="globex") as globex,
    ):
        acme.ingest("# Acme\n\nAcme pricing: 10 euros per seat", source="pricing.md")
        globex.ingest("# Globex\n\nGlobex pricing: 99 dollars per seat", source="pricing.md")
        assert [h.passage.content for h in acme.search_sync("pricing seat")] == [
            "Acme pricing: 10 euros per seat"
        ]
        assert [h.passage.content for h in globex.search_sync("pricing seat")] == [
            "Globex pricing: 99 dollars per seat"
        ]
        assert "Globex" not in acme.retrieve_for_prompt("Globex pricing", 500)
        acme.remove("pricing.md")
        assert globex.count() == 1
        assert acme.count() == 0


def test_inactive_experiences_are_never_returned(store):
    store.add("当用户表示“我还在考虑”时,先询问具体顾虑点。", source="exp-1")
    store.add("对于“费用太贵”的顾虑,从投资回报角度切入。", source="exp-2", active=False)
    store.ingest("# 文档\n\n关于顾虑的一般说明。", source="doc.md", category="")
    view = store.view(categories=["experience"])
    assert [
        h.passage.source for h in store.search_sync("顾虑", limit=10, categories=["experience"])
    ] == ["exp-1"]
    assert {h.passage.source for h in store.search_sync("顾虑", limit=10)} == {"exp-1", "doc.md"}
    assert "投资回报" not in store.retrieve_for_prompt("顾虑 费用", 1000, locale="zh")
    assert store.count() == 2
    assert store.count(include_inactive=True) == 3
    assert store.set_active("exp-2", True) == 1
    assert "exp-2" in {h.passage.source for h in store.search_sync("费用 顾虑", limit=10)}
    store.set_active("exp-1", False)
    assert [
        h.passage.source
        for h in store.search_sync("考虑 顾虑", limit=10, categories=["experience"])
    ] == ["exp-2"]
    assert view.categories == ("experience",)


# -- retrieve_for_prompt ----------------------------------------------------------------------------


def test_retrieve_for_prompt_renders_seed_format(store):
    store.ingest(GUIDE, source="高才通计划申请指南")
    zh = store.retrieve_for_prompt("高才通 申请条件", 500, locale="zh")
    first = zh.splitlines()[0]
    assert re.fullmatch(r"来源:高才通计划申请指南 › 申请条件 \(相似度: (0\.\d\d|1\.00)\)", first), (
        first
    )
    assert "> 高才通计划(TTPS)B类要求申请人须持有全球百强大学颁授的学士学位," in zh
    en = store.retrieve_for_prompt("application fee", 500)
    assert re.match(
        r"Source: 高才通计划申请指南 › Fees \(similarity: \d\.\d\d\)\n> The application fee", en
    )
    assert store.retrieve_for_prompt("application fee", 0) == ""


def test_render_passages_never_exceeds_the_budget():
    hits = [
        KnowledgeHit(
            Passage(
                "line one\nline two is longer than line one\n\nline three",
                "doc",
                heading_path=("H",),
            ),
            0.92,
        ),
        KnowledgeHit(Passage("第二段内容。" * 30, "文档"), 0.85),
    ]
    full = render_passages(hits, 10_000, COUNTER, locale="zh")
    assert full.startswith(
        "来源:doc › H (相似度: 0.92)\n> line one\n> line two is longer than line one\n> line three\n\n来源:文档 (相似度: 0.85)\n> 第二段"
    )
    for budget in range(COUNTER.count(full) + 5):
        out = render_passages(hits, budget, COUNTER, locale="zh")
        assert COUNTER.count(out) <= budget
        assert out == "" or out.startswith("来源:doc › H")
    assert render_passages(hits, COUNTER.count(full), COUNTER, locale="zh") == full


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 400), st.sampled_from(["en", "zh"]))
def test_retrieve_for_prompt_within_budget(budget, locale):
    with SQLiteKnowledgeStore(":memory:") as s:
        s.ingest(GUIDE * 3, source="guide", max_tokens=80, overlap_tokens=10)
        out = s.retrieve_for_prompt("高才通 申请 fee refund", budget, locale=locale, limit=5)
        assert COUNTER.count(out) <= budget


# -- through the sources and the engine ---------------------------------------------------------------


async def test_sources_render_knowledge_and_experiences_from_the_store(store_db):
    db = store_db  # memories and knowledge: one database
    knowledge = open_knowledge_store(db, tenant="acme")
    knowledge.ingest(GUIDE, source="高才通计划申请指南")
    knowledge.add("先询问具体顾虑点,再针对性解答。", source="exp-1", category="experience")
    knowledge.add("不要提这个停用的经验。", source="exp-2", category="experience", active=False)
    memory = open_memory_store(db)
    memory.add(Scope("acme", "alice"), "用户35岁", importance=90)
    engine = ContextEngine(
        sources=[
            RelevantKnowledgeSource(store=knowledge, gate=["申请", "条件"]),
            SimilarExperiencesSource(
                store=knowledge.view(categories=["experience"]), stages=["objection"]
            ),
        ],
        budget=4000,
        locale="zh",
    )
    built = await engine.build(
        "高才通的申请条件是什么?我还有些顾虑", tenant="acme", user="alice",
        state=ConversationState(stage="objection"),
    )  # fmt: skip
    text = "\n".join(m.text for m in built.messages)
    # the source renders the passage's source; the chunk is the 申请条件 one
    assert re.search(
        r"来源:高才通计划申请指南 \(相似度: 0\.[5-9]\d\)\n> 高才通计划\(TTPS\)B类", text
    ), text
    assert "[experience] 先询问具体顾虑点" in text
    assert "停用" not in text
    knowledge.close()
    memory.close()
