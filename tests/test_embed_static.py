"""`StaticEmbedder` (WordLlama's bundled table) and the automatic choice of memory-QA vectors.

The real model is loaded from the installed ``wordllama`` package (the ``static``
extra, part of ``dev``); the tests that need it are skipped without it. The
missing-extra path is simulated by making the imports fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextwright import Budget, ConfigError, Message, MissingDependencyError, TiktokenCounter
from contextwright.history import RecallSource
from contextwright.history._rank import (
    STATIC_WEIGHTS,
    RankWeights,
    TurnIndex,
    TurnRanker,
    default_weights,
)
from contextwright.history._recall import MEMORY_QA_SHARES
from contextwright.interfaces.eval._locomo import memory_qa_engine, resolve_embedder
from contextwright.llm import _embed_static
from contextwright.memory import Embedder, StaticEmbedder, auto_embedder, bundled_wordllama_path
from contextwright.stores import AsyncStore, SQLiteStore

HAVE_STATIC = bundled_wordllama_path() is not None
needs_static = pytest.mark.skipif(not HAVE_STATIC, reason="the static extra is not installed")


@pytest.fixture(scope="module")
def emb() -> StaticEmbedder:
    return StaticEmbedder()


def test_bad_arguments_are_config_errors():
    with pytest.raises(ConfigError, match="dimension"):
        StaticEmbedder(100)
    with pytest.raises(ConfigError, match="dimension"):
        StaticEmbedder(True)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="batch_size"):
        StaticEmbedder(batch_size=0)
    with pytest.raises(ConfigError, match="auto"):
        TurnRanker.for_memory_qa(None, "minilm")


def test_name_identifies_model_and_dimension():
    names = {StaticEmbedder(d).name for d in (64, 128, 256)}
    assert len(names) == 3
    assert all(n.startswith("wordllama/l2_supercat-") for n in names)
    assert StaticEmbedder(128).dimension == 128


# -- the contract, on the real table ---------------------------------------------------------


@needs_static
def test_embedder_contract(emb: StaticEmbedder):
    assert isinstance(emb, Embedder)
    texts = ["I go hiking in the mountains", "", "我喜欢在山里徒步", "hello", "   "]
    out = emb.embed(texts)
    assert out.shape == (5, 256)
    assert out.dtype == np.float32
    assert out.flags["C_CONTIGUOUS"]
    norms = np.linalg.norm(out, axis=1)
    # an empty text has no token: a zero vector (similar to nothing), every other a unit one
    np.testing.assert_allclose(norms[[0, 2, 3]], 1.0, atol=1e-5)
    assert norms[1] == 0.0
    assert emb.embed([]).shape == (0, 256)
    # batching does not change a vector
    one_by_one = np.vstack([emb.embed([t]) for t in texts])
    np.testing.assert_array_equal(one_by_one, out)
    assert StaticEmbedder(256, batch_size=2).embed(texts).tobytes() == out.tobytes()


@needs_static
@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(max_size=60), max_size=6))
def test_vectors_are_deterministic_unit_or_zero_rows(texts: list[str]):
    a = StaticEmbedder(64).embed(texts)
    b = StaticEmbedder(64).embed(texts)  # another instance: the same bytes
    assert a.shape == (len(texts), 64)
    assert a.tobytes() == b.tobytes()
    norms = np.linalg.norm(a, axis=1)
    assert np.all((np.abs(norms - 1.0) < 1e-4) | (norms == 0.0))


@needs_static
def test_a_smaller_dimension_is_the_truncated_model(emb: StaticEmbedder):
    text = ["We roasted marshmallows by the campfire"]
    full, small = emb.embed(text)[0], StaticEmbedder(64).embed(text)[0]
    np.testing.assert_allclose(small, full[:64] / np.linalg.norm(full[:64]), atol=1e-5)


@needs_static
def test_paraphrases_are_closer_than_unrelated_text(emb: StaticEmbedder):
    q, near, far = emb.embed(
        [
            "How does she relax after a stressful week?",
            "I calm down by meditating and taking long baths.",
            "The quarterly report is due next Tuesday.",
        ]
    )
    assert float(q @ near) > float(q @ far) + 0.2


@needs_static
def test_loads_offline_from_the_package_without_wordllama_or_torch(tmp_path):
    # A fresh interpreter with every socket refused: the table and tokenizer come from
    # the package directory; neither wordllama's loader nor torch is imported.
    code = """
import json, socket, sys
def refuse(*a, **k):
    raise OSError("network disabled in this test")
socket.socket.connect = refuse
socket.create_connection = refuse
from contextwright.memory import StaticEmbedder
v = StaticEmbedder(128).embed(["offline", "离线"])
print(json.dumps({"shape": list(v.shape), "mods": sorted(
    m for m in ("wordllama", "torch", "huggingface_hub") if m in sys.modules)}))
"""
    env = {"HF_HUB_OFFLINE": "1", "NO_PROXY": "*", "HOME": str(tmp_path), "PATH": "/usr/bin"}
    env.update({k: v for k, v in __import__("os").environ.items() if k == "PYTHONPATH"})
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"shape": [2, 128], "mods": []}


def test_a_directory_without_the_model_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="no WordLlama"):
        StaticEmbedder(path=tmp_path).embed(["x"])


# -- without the extra ------------------------------------------------------------------------


def test_missing_extra_names_it(monkeypatch):
    # `import safetensors.numpy` fails when its entry in sys.modules is None.
    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)
    with pytest.raises(MissingDependencyError, match=r"contextwright\[static\]") as err:
        StaticEmbedder().embed(["hello"])
    assert err.value.extra == "static"


def test_without_the_package_auto_is_lexical(monkeypatch):
    monkeypatch.setattr(_embed_static, "bundled_wordllama_path", lambda: None)
    assert auto_embedder() is None
    assert TurnRanker.for_memory_qa().embedder is None
    assert resolve_embedder("auto", "en") is None
    with pytest.raises(MissingDependencyError, match="static"):
        StaticEmbedder().embed(["hello"])


# -- the automatic choice ---------------------------------------------------------------------


@needs_static
def test_auto_takes_static_vectors_for_the_measured_languages_only():
    ranker = TurnRanker.for_memory_qa()
    assert isinstance(ranker.embedder, StaticEmbedder)
    assert ranker.weights == STATIC_WEIGHTS == default_weights(ranker.embedder)
    for locale in ("en", "en_GB", "zh", "zh-CN"):
        assert ranker.uses_vectors(TurnIndex(locale=locale)), locale
    assert not ranker.uses_vectors(TurnIndex(locale="fr"))  # not measured: lexical
    assert isinstance(resolve_embedder("auto", "en"), StaticEmbedder)
    assert resolve_embedder("auto", "fr") is None
    assert TurnRanker.for_memory_qa(RankWeights(neighbours=1)).weights == RankWeights(neighbours=1)
    # explicit None: lexical everywhere; an explicit embedder: every language
    assert TurnRanker.for_memory_qa(None, None).embedder is None
    assert RecallSource.for_memory_qa(None, embedder=None).ranker.embedder is None
    mine = StaticEmbedder(64)
    forced = RecallSource.for_memory_qa(None, embedder=mine).ranker
    assert forced.embedder is mine
    assert forced.uses_vectors(TurnIndex(locale="zh"))


# -- recall: a paraphrase with no shared word -------------------------------------------------

FILLER = [
    "My car needs new tyres before the winter comes.",
    "The quarterly report is due next Tuesday at noon.",
    "I bought a new laptop for programming at work.",
    "We painted the kitchen walls a pale blue colour.",
    "The train was late again this morning, twenty minutes.",
    "Our neighbour is building a garage next to the fence.",
    "The bank changed the interest rate on my savings account.",
    "I need to renew my passport before the summer trip.",
]
TARGET = "I calm down by meditating and taking long baths."


def paraphrase_conversation() -> list[Message]:
    msgs = []
    for i in range(6):
        for j, text in enumerate(FILLER):
            say = Message.user if (i + j) % 2 else Message.assistant
            msgs.append(say(f"{text} ({i})"))
        if i == 2:
            msgs.append(Message.assistant(TARGET))
    return msgs


def recalled(store: SQLiteStore, embedder: Any) -> str:
    engine = memory_qa_engine(store, counter=TiktokenCounter("cl100k_base"), embedder=embedder)
    built = engine.build_sync(
        Message.user("How do they relax after a stressful week?"),
        conversation="c", tenant="t", budget=Budget(300, shares=MEMORY_QA_SHARES),
    )  # fmt: skip
    assert built.report.used <= 300
    return "\n".join(m.text for m in built.messages)


@needs_static
def test_a_paraphrase_is_recalled_only_with_the_static_vectors():
    store = SQLiteStore(":memory:")
    store.append("c", paraphrase_conversation(), tenant="t")
    lexical = recalled(store, None)
    assert "(5)" in lexical  # something was recalled (the newest turns, by the priors)
    assert TARGET not in lexical  # but not the answer: not one word in common
    assert TARGET in recalled(store, "auto")  # the default, with the extra installed
    assert TARGET in recalled(store, StaticEmbedder(128))


@needs_static
async def test_auto_leaves_a_conversation_in_an_unmeasured_language_unembedded():
    store = SQLiteStore(":memory:")
    store.append(
        "c", [Message.user("J'aime la randonnée"), Message.assistant("Moi aussi")], tenant="t"
    )
    source = RecallSource.for_memory_qa(AsyncStore(store))
    fr = await source.prepare("c", tenant="t", locale="fr")
    assert len(fr) == 2
    assert fr.vectors is None
    source.drop_indexes()
    zh = await source.prepare("c", tenant="t", locale="zh")
    assert zh.vectors is not None
    assert zh.vectors.shape == (2, 256)
    await source.store.close()


@needs_static
def test_a_fresh_engine_recalls_what_a_warm_one_does():
    # The vectors are recomputed from the stored text: nothing in process changes a result.
    store = SQLiteStore(":memory:")
    store.append("c", paraphrase_conversation(), tenant="t")
    warm = memory_qa_engine(store, counter=TiktokenCounter("cl100k_base"))
    questions = ["How do they relax after a stressful week?", "What about the passport?"]
    for q in questions * 2:  # warm: the index and vectors are kept between builds
        built = warm.build_sync(
            Message.user(q), conversation="c", tenant="t",
            budget=Budget(300, shares=MEMORY_QA_SHARES),
        )  # fmt: skip
        fresh = memory_qa_engine(store, counter=TiktokenCounter("cl100k_base")).build_sync(
            Message.user(q), conversation="c", tenant="t",
            budget=Budget(300, shares=MEMORY_QA_SHARES),
        )  # fmt: skip
        assert [m.text for m in built.messages] == [m.text for m in fresh.messages]
