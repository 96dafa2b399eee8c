"""DDL of the conversation tables (migration m002): see `_migrations.py` for the rules."""

M002_CONVERSATIONS = """
SELECT 1;
"""
