"""DDL of the job queue (migration m003): see `_migrations.py` for the rules.

One row per pending, running or failed job (a completed job is deleted), the
columns of `Job`. Times are seconds since the epoch as ``double precision``
(the queue's injected clock, compared across workers), so they round-trip
exactly. The payload is the JSON text the queue wrote, as ``text``: it reads
back as written, as in SQLite (``jsonb`` would refuse NaN and escaped NUL
characters, and reorder keys); nothing queries inside it. A partial unique
index keeps one active job per (tenant, kind, key): it is what makes a
concurrent enqueue of the same key return the one there. The two other partial
indexes serve claims: due pending jobs by kind and age, running jobs by lease
end.
"""

M003_JOBS = """
CREATE TABLE jobs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant text NOT NULL,
    kind text NOT NULL,
    key text NOT NULL,
    payload text NOT NULL,
    state text NOT NULL CHECK (state IN ('pending', 'running', 'failed')),
    attempts integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL CHECK (max_attempts >= 1),
    run_after double precision NOT NULL,
    owner text,
    worker text,
    lease_until double precision,
    claim bigint NOT NULL DEFAULT 0,
    error text,
    created_at double precision NOT NULL
);
CREATE UNIQUE INDEX jobs_one_active ON jobs (tenant, kind, key)
    WHERE state IN ('pending', 'running');
CREATE INDEX jobs_pending_due ON jobs (kind, run_after, id) WHERE state = 'pending';
CREATE INDEX jobs_running_lease ON jobs (kind, lease_until) WHERE state = 'running';
"""
