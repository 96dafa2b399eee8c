"""The embedded backend: conversations, memory and knowledge in one SQLite file (stdlib `sqlite3`)."""
