"""`StaticEmbedder`: static word vectors, averaged — semantic matching without torch.

A static embedding model is a table of one vector per token: a text's vector is
the mean of its tokens' rows, L2-normalised. No network, no attention, no
torch: it captures that "unwind" and "relax" are close, which full-text search
cannot, but not what a word means in its sentence, as a transformer does.

The model is WordLlama's ``l2_supercat`` (MIT): the Llama-2 token embedding
codebook distilled for sentence similarity, 32,000 tokens x 256 dimensions in
float16, trained Matryoshka-style so that the first 64 or 128 dimensions are a
usable model on their own. The ``wordllama`` package ships it in its wheel
(``weights/l2_supercat_256.safetensors`` and the tokenizer's JSON); this module
reads those two files from the installed package directly, with ``safetensors``
and ``tokenizers`` (both ``wordllama`` dependencies), and never the hub: the
package's own loader would look in a cache directory and then download, and the
weights are all that is needed. The ``static`` extra installs it.

Measured (one CPU thread, a 680-turn LoCoMo conversation): 0.07 ms a turn to
embed, 0.05 ms a question, 0.5 s to load in a fresh process (MiniLM: 12.6 ms,
13 ms and 5.4 s). The extra adds 92 MB to a core install (torch, transformers
and MiniLM about 1 GB). Memory-QA recall (`memory_qa_engine`) at 1k / 2k / 4k /
8k tokens, LoCoMo dev: lexical 0.772 / 0.851 / 0.892 / 0.947, with these vectors
0.786 / 0.863 / 0.917 / 0.962, with MiniLM 0.809 / 0.875 / 0.933 / 0.970 (the
default now adds turn notes and, for English, weights tokens by their rarity in
the conversation, ``history/_sif.py``: 0.798 / 0.873 / 0.928 / 0.968). The
generated Chinese set (with the Chinese query analysis): lexical 0.673 / 0.786
/ 0.964 / 0.991, static 0.845 / 0.923 / 0.982 / 0.991 (``--seed=1``: 0.664 /
0.786 / 0.945 / 1.0 against 0.823 / 0.945 / 0.982 / 1.0); Llama-2's vocabulary
holds the common Hanzi, rarer ones fall back to bytes. On LoCoMo 128 dimensions
scored as 256 (within 0.004), 64 lower (0.781 / 0.856 / 0.910 / 0.951); 256 is
the default.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import ConfigError, MissingDependencyError
from ._embed import Vectors, normalize_rows

__all__ = ["STATIC_LOCALES", "StaticEmbedder", "auto_embedder", "bundled_wordllama_path"]

_WEIGHTS = "weights/l2_supercat_256.safetensors"
_TOKENIZER = "tokenizers/l2_supercat_tokenizer_config.json"
_DIMS = (64, 128, 256)

# The languages whose recall the static vectors were measured to raise (see the module
# docstring): the automatic choice (`auto_embedder`) leaves the others lexical.
STATIC_LOCALES = frozenset({"en", "zh"})


def bundled_wordllama_path() -> Path | None:
    """The installed ``wordllama`` package directory, if it holds the l2_supercat files.

    Found without importing the package (its import pulls in pydantic and its
    compiled helpers, none of which are needed here).
    """
    from importlib.util import find_spec

    try:
        spec = find_spec("wordllama")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for where in spec.submodule_search_locations:
        path = Path(where)
        if (path / _WEIGHTS).is_file() and (path / _TOKENIZER).is_file():
            return path
    return None


class StaticEmbedder:
    """WordLlama l2_supercat static embeddings, ``dimension`` 64, 128 or 256.

    ``dimension`` truncates the 256-dimension vectors (the model was trained for
    it). ``path`` is a directory laid out as the ``wordllama`` package
    (``weights/…``, ``tokenizers/…``); by default the installed package's. The
    table is loaded on first use (about 16 MB; half a second) and shared by every
    instance of the same path and dimension; ``embed`` is thread-safe. ``name`` names model and dimension:
    vectors of another dimension are another model's.
    """

    def __init__(
        self, dimension: int = 256, *, path: str | Path | None = None, batch_size: int = 256
    ) -> None:
        if isinstance(dimension, bool) or dimension not in _DIMS:
            raise ConfigError(f"StaticEmbedder dimension must be one of {_DIMS}, got {dimension!r}")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        self._dimension = dimension
        self.name = f"wordllama/l2_supercat-{dimension}"
        self.path = None if path is None else Path(path)
        self.batch_size = batch_size
        self._table: Any = None
        self._tokenizer: Any = None

    @property
    def dimension(self) -> int:
        return self._dimension

    def _load(self) -> tuple[Any, Any]:
        if self._table is None:
            try:
                import safetensors.numpy  # noqa: F401
                import tokenizers  # noqa: F401
            except ImportError:
                raise MissingDependencyError("wordllama", "static", "StaticEmbedder") from None
            path = self.path or bundled_wordllama_path()
            if path is None:
                raise MissingDependencyError("wordllama", "static", "StaticEmbedder")
            self._table, self._tokenizer = _load_model(path.resolve(), self._dimension)
        return self._table, self._tokenizer

    def embed(self, texts: Sequence[str]) -> Vectors:
        return self.pool(self.tokens(texts))

    @property
    def vocabulary(self) -> int:
        """How many tokens the table holds (token ids run from 0 to this, exclusive)."""
        return len(self._load()[0])

    def tokens(self, texts: Sequence[str]) -> list[Any]:
        """Each text's token ids (int64 arrays), as `embed` pools them."""
        table, tokenizer = self._load()
        rows = len(table)
        out: list[Any] = []
        for start in range(0, len(texts), self.batch_size):
            chunk = [str(t) for t in texts[start : start + self.batch_size]]
            for enc in tokenizer.encode_batch(chunk, add_special_tokens=False):
                ids = np.asarray(enc.ids, dtype=np.int64)
                out.append(ids[(ids >= 0) & (ids < rows)])
        return out

    def pool(self, tokens: Sequence[Any], weights: Any = None) -> Vectors:
        """Unit vectors of token-id arrays: the mean of their rows, or the ``weights``-weighted mean.

        ``weights`` (one float per token of the table) lets a caller weigh tokens
        by how informative they are (see `history._sif`); None is the plain mean.
        """
        table, _ = self._load()
        out = np.zeros((len(tokens), self._dimension), dtype=np.float32)
        for i, ids in enumerate(tokens):
            if not len(ids):  # a text with no token (empty) keeps a zero vector
                continue
            if weights is None:
                out[i] = table[ids].mean(axis=0)
            else:
                w = weights[ids]
                out[i] = w @ table[ids]  # the scale is normalised away
        return normalize_rows(out, self._dimension, who=self.name)

    def __repr__(self) -> str:
        return f"StaticEmbedder({self._dimension})"


@functools.lru_cache(maxsize=4)
def _load_model(path: Path, dimension: int) -> tuple[Any, Any]:
    """The table (float32, truncated) and tokenizer under ``path``, loaded once per process.

    Every engine that picks the static vectors (`auto_embedder`) shares one copy
    (16 MB at 256 dimensions) instead of reading its own.
    """
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    weights, tok = path / _WEIGHTS, path / _TOKENIZER
    if not (weights.is_file() and tok.is_file()):
        raise ConfigError(f"no WordLlama l2_supercat model at {path}")
    try:
        tensors = load_file(str(weights))
        tokenizer = Tokenizer.from_file(str(tok))
    except Exception as exc:  # a corrupt or foreign file: safetensors and tokenizers errors
        raise ConfigError(f"cannot load the static embedding model at {path}: {exc}") from exc
    table = tensors.get("embedding.weight")
    if table is None or table.ndim != 2 or table.shape[1] < dimension:
        raise ConfigError(f"{weights} holds no embedding table of width >= {dimension}")
    # Truncating before pooling equals pooling then truncating (the mean is linear).
    table = np.ascontiguousarray(table[:, :dimension], dtype=np.float32)
    table.flags.writeable = False  # shared by every instance
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return table, tokenizer


def auto_embedder() -> StaticEmbedder | None:
    """A `StaticEmbedder` when the ``static`` extra is installed, else None (lexical).

    Checks that the files and the two readers are there without loading the
    table: that happens on first use, off the event loop (`RecallSource` embeds
    on a worker thread).
    """
    from importlib.util import find_spec

    if bundled_wordllama_path() is None:
        return None
    if find_spec("safetensors") is None or find_spec("tokenizers") is None:
        return None
    return StaticEmbedder()
