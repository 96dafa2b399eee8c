"""DDL of the job queue (migration m003): see `_migrations.py` for the rules."""

M003_JOBS = """
SELECT 1;
"""
