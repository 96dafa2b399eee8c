"""docs/deploy.md works as written: its Python runs against a real PostgreSQL and Redis,
and its shell lines name commands that exist (``contextwright migrate``)."""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import textwrap
from pathlib import Path

import yaml

from contextwright.interfaces.cli import main
from tests.rediskit import shared_url

DOC = Path(__file__).resolve().parents[1] / "docs" / "deploy.md"
ROOT = Path(__file__).resolve().parents[1]


def blocks(lang: str) -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    found = re.findall(rf"^ *```{lang}\n(.*?)^ *```", text, re.M | re.S)
    return [textwrap.dedent(b) for b in found]


def test_the_python_runs_on_postgresql_and_redis(pg_url, monkeypatch, capsys):
    monkeypatch.setenv("CONTEXTWRIGHT_DB", pg_url)
    monkeypatch.setenv("CONTEXTWRIGHT_REDIS", shared_url())
    assert main(["migrate"]) == 0  # step 4, from the environment
    assert "applied" in capsys.readouterr().out
    [source] = blocks("python")
    code = compile(
        source, "docs/deploy.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
    )
    ns: dict[str, object] = {"__name__": "deploy"}
    loop = asyncio.new_event_loop()
    try:
        assert code.co_flags & inspect.CO_COROUTINE
        loop.run_until_complete(eval(code, ns))
        convs, engine = ns["convs"], ns["engine"]
        stored = loop.run_until_complete(_stored(convs))
        assert stored == ["what did we decide about the refund?",
                          "We agreed to refund order 88231 in full."]  # fmt: skip
        assert type(engine.cache).__name__ == "RedisCache"  # type: ignore[attr-defined]
        assert "receipt" not in capsys.readouterr().err
    finally:
        loop.run_until_complete(ns["convs"].aclose())  # type: ignore[attr-defined]
        loop.close()


async def _stored(convs) -> list[str]:  # type: ignore[no-untyped-def]
    return [m.text async for m in convs.messages("conv-42", tenant="acme", user="u-7")]


def test_the_shell_lines_name_real_commands():
    shell = "\n".join(blocks("bash"))
    assert "contextwright migrate" in shell
    assert "docker compose up -d" in shell
    assert "CONTEXTWRIGHT_DB=postgresql://" in shell


def test_compose_starts_postgres_with_pgvector_and_redis():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    services = compose["services"]
    assert services["postgres"]["image"].startswith("pgvector/pgvector:")
    assert services["redis"]["image"].startswith("redis:")
    # the URL the doc exports matches the compose credentials and database
    env = services["postgres"]["environment"]
    shell = "\n".join(blocks("bash"))
    assert f"{env['POSTGRES_USER']}:" in shell
    assert f"/{env['POSTGRES_DB']}" in shell
