"""DDL of long-term memory and knowledge (migrations m004, m005): see `_migrations.py`."""

M004_MEMORY = """
SELECT 1;
"""

M005_KNOWLEDGE = """
SELECT 1;
"""
