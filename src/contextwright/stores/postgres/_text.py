"""What PostgreSQL's full-text search is given: segmented terms in, tsquery text out.

PostgreSQL has no Chinese parser, and its default parser reads URLs, e-mails,
paths and hyphenated words in its own ways. So the application does what FTS5's
``unicode61`` tokenizer does on SQLite, and the server only stems:

- `index_terms`: a message's searchable text (`index_text`, as on SQLite),
  segmented as the SQLite index is (``text/_terms.py`` `segment`: CJK runs as
  overlapping bigrams plus the run's last character), split into runs of
  letters and digits, lower-cased and stripped of diacritics (FTS5's
  ``remove_diacritics 2``), joined by spaces. The server's ``cw_text``
  configuration then sees one plain word per term and stems it (English
  Snowball, no stop words; ``_schema_log.py``). ``dl`` is their number (BM25's
  document length).
- `unit_queries`: a query's terms as the message index is searched
  (``text/_query.py`` `message_units`, the same units FTS5 gets), each written
  as `to_tsquery` text: a word ``'w'``, a CJK run the phrase of its bigrams
  ``'上海' <-> '海工'``, a bigram ``'上海'``, a lone CJK character the prefix
  ``'上':*``. Every operand is built from letters and digits only and quoted, so
  no tsquery syntax from the user survives (``!``, ``&``, ``<->`` are searched
  as nothing, never parsed).

The text given to ``to_tsvector`` is capped (`MAX_INDEX_CHARS`): a tsvector may
not exceed 1 MB, and a huge tool result would otherwise fail its append. The
message is stored whole; only its search terms beyond the cap are left out.
"""

from __future__ import annotations

import unicodedata

from ...model._messages import Message
from ...text._query import message_units
from ...text._terms import INDEX_WORD, bigrams, segment
from ..sqlite._fts import index_text

__all__ = ["MAX_INDEX_CHARS", "index_terms", "normal", "unit_queries"]

MAX_INDEX_CHARS = 200_000


def normal(term: str) -> str:
    """``term`` lower-cased, without diacritics (ASCII: only lower-cased)."""
    term = term.lower()
    if term.isascii():
        return term
    stripped = "".join(
        c for c in unicodedata.normalize("NFD", term) if not unicodedata.combining(c)
    )
    return unicodedata.normalize("NFC", stripped)


def index_terms(message: Message) -> tuple[str, int]:
    """(the text for ``to_tsvector``, its number of terms) of a message; ("", 0) if none."""
    text = index_text(message)
    if not text or text.isspace():
        return "", 0
    words = INDEX_WORD.findall(segment(text[:MAX_INDEX_CHARS]))
    if not words:
        return "", 0
    return " ".join(normal(w) for w in words), len(words)


def _quoted(term: str) -> str:
    # Terms are runs of letters and digits (no quote, no backslash); doubled anyway.
    return "'" + term.replace("'", "''").replace("\\", "\\\\") + "'"


def unit_queries(query: str) -> list[str]:
    """Each term of ``query`` (`message_units`) as its own ``to_tsquery`` text, in order."""
    out: list[str] = []
    for kind, text in message_units(query):
        if not normal(text):
            continue
        if kind == "prefix":
            out.append(_quoted(normal(text)) + ":*")
        elif kind == "phrase":
            out.append(" <-> ".join(_quoted(normal(g)) for g in bigrams(text)))
        else:
            out.append(_quoted(normal(text)))
    return list(dict.fromkeys(out))
