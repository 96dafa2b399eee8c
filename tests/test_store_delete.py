"""Deleting a conversation from the SQLite file: nothing of it is left, in any table.

The contract suites check what every backend answers after a delete; these look
inside the file: the contentless full-text index holds no row and no term of the
deleted conversation (FTS5 forgets a row only when told its exact text), the index
stays sound, a deleted conversation's ``cid`` (the high bits of its index rowids)
is never given out again, a file made before m010 is brought up to date, and
one made before m011 keeps its versions and counts on above a deleted one's.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from contextwright import Message, ToolCallPart
from contextwright.stores import SQLiteStore

T = "tenant"
_PER_CID = ("messages", "summaries", "compactions", "working_memory", "pinned")


def _thread(word: str) -> list[Message]:
    """English, Chinese, a tool call and its result, and an image-free blank turn."""
    call = ToolCallPart("k1", "lookup", f'{{"q": "{word} 天气"}}')
    return [
        Message.user(f"the {word} budget, 我在上海工作"),
        Message.assistant(f"checking {word}", tool_calls=[call]),
        Message.tool("k1", f"{word} result rows"),
        Message.assistant("   "),
        Message.user(f"more about {word}"),
    ]


def _index_rows(s: SQLiteStore) -> dict[str, list[int]]:
    assert s._conn is not None
    return {
        t: [r for (r,) in s._conn.execute(f"SELECT rowid FROM {t} ORDER BY rowid")]
        for t in ("message_fts", "tool_result_fts")
    }


def _matches(s: SQLiteStore, word: str) -> int:
    """Rows of either index matching ``word``, whatever their conversation."""
    assert s._conn is not None
    return sum(
        s._conn.execute(f"SELECT count(*) FROM {t} WHERE {t} MATCH ?", (word,)).fetchone()[0]
        for t in ("message_fts", "tool_result_fts")
    )


def _sound(s: SQLiteStore) -> None:
    assert s._conn is not None
    for t in ("message_fts", "tool_result_fts"):
        s._conn.execute(f"INSERT INTO {t} ({t}) VALUES ('integrity-check')")


def test_deleting_leaves_no_index_row_nor_term_of_the_conversation(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "d.db") as s:
        s.append("keep", _thread("alpha"), tenant=T, user="u")
        s.append("gone", _thread("omega"), tenant=T, user="u")
        s.append("gone", _thread("omega"), tenant="other", user="u")  # same id, other tenant
        for conv, tenant in (("keep", T), ("gone", T), ("gone", "other")):
            assert s.search(conv, "budget", tenant=tenant)  # indexed when searched
        s.append("gone", [Message.user("omega unindexed tail")], tenant=T, user="u")
        s.put_working("gone", "k", "v", tenant=T, ttl=60)
        s.pin("gone", "p", tenant=T)
        before = _index_rows(s)
        assert _matches(s, "omega") == 8  # 4 rows in each tenant's "gone"
        assert s.delete_conversation("gone", tenant=T) is True
        _sound(s)
        assert _matches(s, "omega") == 4  # the other tenant's only
        assert _matches(s, "alpha") == 4
        gone_cid = 2
        after = _index_rows(s)
        assert all(r >> 32 != gone_cid for rows in after.values() for r in rows)
        assert {t: [r for r in before[t] if r >> 32 != gone_cid] for t in before} == after
        assert s._conn is not None
        for table in _PER_CID:
            n = s._conn.execute(f"SELECT count(*) FROM {table} WHERE cid = ?", (gone_cid,))
            assert n.fetchone() == (0,)
        # the id starts again at seq 1, under a cid never given out before
        again = s.append("gone", [Message.user("omega reborn")], tenant=T, user="v")
        assert again[0].seq == 1
        cids = dict(s._conn.execute("SELECT id || '/' || tenant, cid FROM conversations"))
        assert cids == {"keep/tenant": 1, "gone/other": 3, "gone/tenant": 4}
        assert [h.message.text for h in s.search("gone", "omega", tenant=T)] == ["omega reborn"]
        assert len(s.search("gone", "omega", tenant="other")) == 3


def test_a_cid_is_never_given_out_twice(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "c.db") as s:
        for conv in ("a", "b", "c"):
            s.append(conv, [Message.user(f"{conv} words")], tenant=T, user="u")
            s.search(conv, "words", tenant=T)
        for conv in ("c", "a"):  # the newest first: max(cid) would give it out again
            assert s.delete_conversation(conv, tenant=T)
        assert s._conn is not None
        assert s._conn.execute("SELECT cid FROM retired_cids").fetchall() == [(3,)]
        s.append("d", [Message.user("d words")], tenant=T, user="u")
        assert s._conn.execute("SELECT cid FROM conversations WHERE id = 'd'").fetchone() == (4,)
        assert _index_rows(s)["message_fts"] == [(2 << 32) | 1]  # b's; d is not searched yet
        _sound(s)


def test_a_file_from_before_m010_gets_the_new_tables(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with SQLiteStore(db) as s:
        s.append("c", [Message.user("kept")], tenant=T, user="u")
    conn = sqlite3.connect(db)
    with conn:
        for table in ("receipts", "api_keys", "retired_cids"):
            conn.execute(f"DROP TABLE {table}")
        conn.execute("DELETE FROM _migrations WHERE name = 'm010_service'")
    conn.close()
    with SQLiteStore(db) as s:
        assert s.applied_migrations == ["m010_service"]
        assert s.record_receipt("c", {"n": 1}, tenant=T).id == 1
        assert s.delete_conversation("c", tenant=T) is True
        assert s.read("c", tenant=T) == []


def test_a_file_from_before_m011_keeps_its_versions_and_counts_on(tmp_path: Path) -> None:
    """m011 on a file with conversations: each keeps its version and gets ``first_version``
    1; one deleted and made again continues above its last version, in another cid."""
    db = tmp_path / "old.db"
    with SQLiteStore(db) as s:
        for n in range(3):
            s.append("c", [Message.user(f"kept {n}")], tenant=T, user="u")
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("DROP TABLE retired_versions")
        conn.execute("ALTER TABLE conversations DROP COLUMN first_version")
        conn.execute("DELETE FROM _migrations WHERE name = 'm011_versions_across_deletes'")
    conn.close()
    with SQLiteStore(db) as s:
        assert s.applied_migrations == ["m011_versions_across_deletes"]
        info = s.get_conversation("c", tenant=T)
        assert info is not None
        assert (info.version, info.first_version) == (3, 1)
        assert s.delete_conversation("c", tenant=T) is True
        assert s._conn is not None
        assert s._conn.execute("SELECT * FROM retired_versions").fetchall() == [(T, "c", 3)]
        s.append("c", [Message.user("again")], tenant=T, user="v")
        info = s.get_conversation("c", tenant=T)
        assert info is not None
        assert (info.version, info.first_version) == (4, 4)
