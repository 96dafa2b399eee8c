"""The one-pass search of a small PostgreSQL scope finds exactly what separate statements find.

`PgHybrid._one_pass` reads a scope of at most ``exact_max`` rows once and derives the
document frequencies, the lexical candidates (rank, then newest), the exact vector
candidates (distance, then oldest) and every candidate's cosine from that one read.
The oracle here is the plain way, one statement per answer, written independently
of the store; a property compares both on random scopes (repeated words so ranks and
distances tie, superseded and inactive rows, rows without a vector, categories).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextwright.memory import Scope
from contextwright.text._query import query_units
from contextwright.text._scores import idf
from tests import pg
from tests.test_memory import ConceptEmbedder

psycopg = pytest.importorskip("psycopg")

A = Scope("acme", "one-pass")
WORDS = ["refund", "invoice", "coffee", "tea", "the", "shipping", "late", "咖啡", "发票"]
CATS = ["fact", "preference"]


@pytest.fixture(scope="module")
def stores():
    from contextwright.memory import PostgresMemoryStore

    url = pg.create_database("cwonepass")
    hybrid = PostgresMemoryStore(url, embedder=ConceptEmbedder())
    lexical = PostgresMemoryStore(url)  # its rows have no vector
    yield url, hybrid, lexical
    hybrid.close()
    lexical.close()
    pg.drop_database(url)


def oracle(url: str, units, qvec, k: int, cats, include_superseded: bool):
    """(idfs, lexical [(mid, rank)], vector [(mid, cosine)], cosines by mid), the plain way."""
    from contextwright.stores.postgres._hybrid import any_tsquery, unit_tsquery
    from contextwright.stores.postgres._space import vector_literal

    with psycopg.connect(url) as c:
        c.execute("SET search_path = contextwright, public")
        sid, size = c.execute(
            'SELECT sid, size FROM memory_scopes WHERE tenant = %s AND "user" = %s '
            "AND namespace = %s",
            (A.tenant, A.user, A.namespace),
        ).fetchone()
        where = "m.sid = %s AND m.active" + (
            "" if include_superseded else " AND m.superseded_by IS NULL"
        )
        params: list = [sid]
        if cats is not None:
            where, params = where + " AND m.category = ANY(%s)", [sid, cats]
        idfs, lexical = [], []
        if units:
            for sql, p in map(unit_tsquery, units):
                (n,) = c.execute(
                    f"SELECT count(*) FROM memories m WHERE m.sid = %s AND m.tsv @@ {sql}", (sid, p)
                ).fetchone()
                idfs.append(idf(n, size))
            q, qp = any_tsquery(units)
            lexical = c.execute(
                f"SELECT m.mid, ts_rank(m.tsv, {q}) FROM memories m WHERE {where} AND m.tsv @@ {q} "
                "ORDER BY 2 DESC, 1 DESC LIMIT %s",
                [*qp, *params, *qp, k],
            ).fetchall()
        vector, cosines = [], {}
        if qvec is not None:
            v = vector_literal(qvec)
            vector = c.execute(
                f"SELECT m.mid, 1 - (m.embedding <=> %s::vector) FROM memories m WHERE {where} "
                "AND m.embedding IS NOT NULL ORDER BY m.embedding <=> %s::vector, m.mid LIMIT %s",
                [v, *params, v, k],
            ).fetchall()
            ids = sorted({i for i, _ in lexical} | {i for i, _ in vector})
            cosines = dict(
                c.execute(
                    "SELECT mid, 1 - (embedding <=> %s::vector) FROM memories "
                    "WHERE mid = ANY(%s) AND embedding IS NOT NULL",
                    (v, ids),
                ).fetchall()
            )
    return idfs, lexical, vector, cosines


memory = st.tuples(
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join),
    st.sampled_from(CATS),
    st.sampled_from([None, "k1", "k2"]),  # a key: a later memory supersedes the earlier
    st.booleans(),  # with a vector
    st.integers(0, 9),  # 0: deactivated
)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(memory, min_size=1, max_size=25),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
    st.integers(1, 6),
    st.sampled_from([None, ["fact"], ["fact", "preference"]]),
    st.booleans(),
)
def test_one_pass_finds_what_separate_statements_find(stores, rows, query, k, cats, superseded):
    url, hybrid, lexical = stores
    hybrid.forget_scope(A)
    for content, cat, key, with_vector, active in rows:
        m = (hybrid if with_vector else lexical).add(A, content, category=cat, key=key)
        if not active:
            hybrid.set_active(A, m.id, False)
    units = query_units(query)
    for store in (hybrid, lexical):
        qvec = store.space.query_vector(query)
        found = store._candidates(A, units, qvec, k, cats, superseded)
        assert found is not None
        got_rows, cands = found
        idfs, lex, vec, cos = oracle(url, units, qvec, k, cats, superseded)
        assert cands.idfs == idfs
        assert list(cands.lexical.items()) == [(int(i), float(r)) for i, r in lex]
        assert cands.vector == [(int(i), float(c)) for i, c in vec]
        assert cands.cosines == {int(i): float(c) for i, c in cos.items()}
        assert sorted(r[0] for r in got_rows) == sorted(cands.ids)


def test_ties_keep_the_orders_of_separate_statements(stores):
    """Equal ranks: the newest first; equal distances: the oldest first, cut at ``k``."""
    url, hybrid, _ = stores
    hybrid.forget_scope(A)
    mids = [hybrid.add(A, f"refund {w}") for w in ("tea", "tea", "tea", "coffee")]
    assert len({m.id for m in mids}) == 4
    units = query_units("refund tea")
    qvec = hybrid.space.query_vector("refund tea")
    _, cands = hybrid._candidates(A, units, qvec, 2, None, False)
    idfs, lex, vec, cos = oracle(url, units, qvec, 2, None, False)
    assert cands.idfs == idfs
    assert cands.cosines == {int(i): float(c) for i, c in cos.items()}
    assert list(cands.lexical) == [int(i) for i, _ in lex]
    assert cands.vector == [(int(i), float(c)) for i, c in vec]
    ranked = sorted(cands.lexical)
    assert list(cands.lexical) == ranked[::-1][: len(lex)]  # the tea rows, newest first
    assert [i for i, _ in cands.vector] == sorted(i for i, _ in cands.vector)  # oldest first
