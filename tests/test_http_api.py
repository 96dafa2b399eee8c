"""The HTTP API through a real uvicorn server on loopback, with httpx (issue #21, parts 1-3).

One server (SQLite file, keys of tenants A and B) serves the module; every
response a test receives is validated against the service's own /openapi.json
(`SpecCheck`). Each test uses conversation ids of its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from contextwright.interfaces.http import Settings

from .http_kit import Served, SpecCheck, add_key, client, revoke, serving

MAX_BODY = 64 * 1024


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    db = str(tmp_path_factory.mktemp("http") / "service.db")
    settings = Settings(db=db, budget=3000, max_body=MAX_BODY, system_prompt="You help.")
    with serving(settings) as s:
        yield s


@pytest.fixture(scope="module")
def check(served: Served) -> SpecCheck:
    return SpecCheck(served.url)


@pytest.fixture(scope="module")
def keys(served: Served) -> dict[str, str]:
    db = served.settings.db
    assert db is not None
    return {"A": add_key(db, "tenant-a", "a"), "B": add_key(db, "tenant-b", "b")}


@pytest.fixture
def a(served: Served, keys: dict[str, str], check: SpecCheck) -> Iterator[httpx.Client]:
    with client(served.url, keys["A"], check) as c:
        yield c


@pytest.fixture
def b(served: Served, keys: dict[str, str], check: SpecCheck) -> Iterator[httpx.Client]:
    with client(served.url, keys["B"], check) as c:
        yield c


def chat(n: int, prefix: str = "m") -> list[dict[str, Any]]:
    """``n`` alternating user/assistant messages with client ids."""
    roles = ("user", "assistant")
    return [
        {
            "role": roles[i % 2],
            "content": f"turn {i}: about topic{i} and more",
            "id": f"{prefix}{i}",
        }
        for i in range(n)
    ]


def problem(r: httpx.Response, status: int, title: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = r.json()
    assert body["title"] == title, body
    assert body["status"] == status
    assert body["type"] == f"urn:contextwright:error:{title}"
    return body


# -- documents and probes ------------------------------------------------------------------


def test_openapi_docs_and_probes(served: Served, check: SpecCheck) -> None:
    spec = check.spec
    assert spec["openapi"].startswith("3.1")
    for path in (
        "/v1/conversations", "/v1/conversations/{conversation}/messages",
        "/v1/conversations/{conversation}/context", "/v1/memories", "/v1/knowledge/search",
        "/healthz", "/readyz", "/metrics",
    ):  # fmt: skip
        assert path in spec["paths"]
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    with client(served.url, None, check) as anon:
        assert anon.get("/healthz").json() == {"status": "ok"}
        assert anon.get("/readyz").json() == {"status": "ready"}
    assert "swagger" in httpx.get(served.url + "/docs").text.lower()  # not an API operation


# -- auth ----------------------------------------------------------------------------------


def test_auth_missing_wrong_and_revoked_keys(
    served: Served, keys: dict[str, str], check: SpecCheck
) -> None:
    key = keys["A"]
    key_id, secret = key.split("_")[1], key.split("_", 2)[2]
    wrong_secret = f"cw_{key_id}_{('A' if secret[0] != 'A' else 'B') + secret[1:]}"
    unknown_id = f"cw_{'0' * 12}_{secret}"
    for headers in (
        {}, {"Authorization": "Basic dXNlcjpwYXNz"}, {"Authorization": "Bearer nonsense"},
        {"Authorization": f"Bearer {wrong_secret}"}, {"Authorization": f"Bearer {unknown_id}"},
    ):  # fmt: skip
        with httpx.Client(base_url=served.url, event_hooks={"response": [check]}) as c:
            r = c.get("/v1/conversations", headers=headers)
        body = problem(r, 401, "Unauthorized")
        assert r.headers["www-authenticate"] == "Bearer"
        assert secret not in r.text
        assert key_id not in body["detail"]
    db = served.settings.db
    assert db is not None
    doomed = add_key(db, "tenant-a", "doomed")
    with client(served.url, doomed, check) as c:
        assert c.get("/v1/conversations").status_code == 200
        revoke(db, doomed)
        problem(c.get("/v1/conversations"), 401, "Unauthorized")
    # no key, not even a fragment of a secret, reached a log line
    logs = "\n".join(served.logs)
    assert "GET /v1/conversations" in logs  # the access log is on, and captured
    for k in (*keys.values(), doomed):
        assert k.split("_", 2)[2] not in logs


def test_another_tenants_ids_answer_404(a: httpx.Client, b: httpx.Client) -> None:
    assert a.post("/v1/conversations/iso/messages", json={"messages": chat(4, "iso")}).is_success
    built = a.post("/v1/conversations/iso/context", json={"message": "and topic2?"})
    assert built.status_code == 200
    for method, path in (
        ("GET", "/v1/conversations/iso"), ("GET", "/v1/conversations/iso/messages"),
        ("GET", "/v1/conversations/iso/summary"), ("GET", "/v1/conversations/iso/compactions"),
        ("GET", "/v1/conversations/iso/readback/k1"), ("DELETE", "/v1/conversations/iso"),
    ):  # fmt: skip
        problem(b.request(method, path), 404, "NotFoundError")
    problem(b.post("/v1/conversations/iso/compact", json={}), 404, "NotFoundError")
    problem(b.post("/v1/conversations/iso/recall", json={"query": "topic2"}), 404, "NotFoundError")
    assert b.get("/v1/conversations/iso/receipts").json() == {"receipts": []}
    assert all(c["id"] != "iso" for c in b.get("/v1/conversations").json()["conversations"])
    # B's build of the same id is B's own conversation: nothing of A's in it
    mine = b.post("/v1/conversations/iso/context", json={"message": "what about topic2?"})
    assert "topic2 and more" not in json.dumps(mine.json()["request"])
    assert a.get("/v1/conversations/iso").json()["message_count"] == 5  # 4 + A's built message
    assert len(a.get("/v1/conversations/iso/receipts").json()["receipts"]) == 1


# -- conversations and messages ------------------------------------------------------------


def test_conversation_create_list_get_delete(a: httpx.Client) -> None:
    r = a.post("/v1/conversations", json={"id": "life", "user": "u1", "metadata": {"k": 1}})
    assert r.status_code == 201
    assert r.json()["created"] is True
    assert r.json()["user"] == "u1"
    again = a.post("/v1/conversations", json={"id": "life", "user": "u1"})
    assert again.json()["created"] is False
    problem(a.post("/v1/conversations", json={"id": "a/b"}), 422, "RequestValidationError")
    fresh = a.post("/v1/conversations", json={}).json()
    assert re.fullmatch(r"[0-9a-f]{32}", fresh["id"])
    ids = [c["id"] for c in a.get("/v1/conversations").json()["conversations"]]
    assert {"life", fresh["id"]} <= set(ids)
    assert [c["id"] for c in a.get("/v1/conversations?user=u1").json()["conversations"]] == ["life"]
    assert a.get("/v1/conversations/life").json()["metadata"] == {"k": 1}
    other = {"messages": chat(1, "x"), "user": "u2"}  # the conversation is u1's
    assert problem(a.post("/v1/conversations/life/messages", json=other), 422,
                   "InvalidMessageError")["field"] == "user"  # fmt: skip
    a.post("/v1/conversations/life/messages", json={"messages": chat(3, "life")})
    assert a.delete("/v1/conversations/life").json() == {"id": "life", "deleted": True}
    problem(a.get("/v1/conversations/life"), 404, "NotFoundError")
    problem(a.delete("/v1/conversations/life"), 404, "NotFoundError")
    again = a.post("/v1/conversations/life/messages", json={"messages": chat(1, "new")})
    assert again.json()["messages"][0]["seq"] == 1  # a new conversation of that id


def test_append_is_idempotent_by_client_id(a: httpx.Client) -> None:
    body = {"messages": chat(4, "idem")}
    first = a.post("/v1/conversations/idem/messages", json=body).json()
    second = a.post("/v1/conversations/idem/messages", json=body).json()
    assert first == second
    assert [m["seq"] for m in first["messages"]] == [1, 2, 3, 4]
    assert a.get("/v1/conversations/idem").json()["message_count"] == 4
    # a retry of the last two with one new message stores only the new one
    more = {"messages": [*chat(4, "idem")[2:], {"role": "user", "content": "new", "id": "idem9"}]}
    r = a.post("/v1/conversations/idem/messages", json=more).json()
    assert [m["seq"] for m in r["messages"]] == [3, 4, 5]
    # the same id with other content is refused, nothing written
    clash = {"messages": [{"role": "user", "content": "changed", "id": "idem0"}]}
    problem(a.post("/v1/conversations/idem/messages", json=clash), 422, "InvalidMessageError")
    assert a.get("/v1/conversations/idem").json()["message_count"] == 5


def test_append_reads_every_provider_shape(a: httpx.Client) -> None:
    anthropic = [
        {"role": "user", "content": [{"type": "text", "text": "weather in Oslo?"}], "id": "an1"},
        {"role": "assistant", "id": "an2", "content": [
            {"type": "tool_use", "id": "tu1", "name": "weather", "input": {"city": "Oslo"}}]},
        {"role": "user", "id": "an3", "content": [
            {"type": "tool_result", "tool_use_id": "tu1", "content": "4 degrees"},
            {"type": "text", "text": "thanks"}]},
    ]  # fmt: skip
    r = a.post("/v1/conversations/shapes/messages", json={"messages": anthropic}).json()
    assert [(m["id"], m["role"]) for m in r["messages"]] == [
        ("an1", "user"), ("an2", "assistant"), ("an3", "tool"), ("an3#2", "user"),
    ]  # fmt: skip
    again = a.post("/v1/conversations/shapes/messages", json={"messages": anthropic}).json()
    assert again == r
    responses = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}],
         "id": "re1"},
        {"type": "function_call", "call_id": "fc1", "name": "f", "arguments": "{}", "id": "re2"},
        {"type": "function_call_output", "call_id": "fc1", "output": "ok", "id": "re3"},
    ]  # fmt: skip
    r = a.post("/v1/conversations/shapes/messages", json={"messages": responses}).json()
    assert [m["role"] for m in r["messages"]] == ["user", "assistant", "tool"]
    page = a.get("/v1/conversations/shapes/messages", params={"limit": 3}).json()
    assert [m["seq"] for m in page["messages"]] == [1, 2, 3]
    assert page["next_after_seq"] == 3
    rest = a.get("/v1/conversations/shapes/messages", params={"after_seq": 3}).json()
    assert [m["seq"] for m in rest["messages"]] == [4, 5, 6, 7]
    assert rest["next_after_seq"] is None
    assert rest["messages"][0]["parts"][0]["text"] == "thanks"


def test_append_and_build_keep_reasoning_and_thinking(a: httpx.Client) -> None:
    golden = Path(__file__).parent / "golden"
    items = json.loads((golden / "responses_reasoning_tools.json").read_text())["input"]
    r = a.post("/v1/conversations/reasoning/messages", json={"messages": items})
    assert r.status_code == 200, r.text
    stored = {m["id"] for m in r.json()["messages"]}
    assert items[2]["id"] in stored  # a Responses item's own id is its client id too
    body = {"message": "and the hotel?", "budget": 20000, "format": "responses"}
    built = a.post("/v1/conversations/reasoning/context", json=body)
    assert built.status_code == 200, built.text
    wire = json.dumps(built.json()["request"]["input"])
    assert items[2]["encrypted_content"] in wire  # the reasoning item, as it came
    assert '"id": "fc_68af4031' in wire  # with the id that ties the call to it
    request = json.loads((golden / "anthropic_thinking_tools.json").read_text())
    r = a.post("/v1/conversations/thinking/messages", json={"messages": request["messages"]})
    assert r.status_code == 200, r.text
    body = {"message": "anything else?", "budget": 20000, "format": "anthropic"}
    built = a.post("/v1/conversations/thinking/context", json=body)
    assert built.status_code == 200, built.text
    assert request["messages"][1]["content"][0]["signature"] in built.text


def test_bad_bodies_answer_422_and_write_nothing(a: httpx.Client) -> None:
    url = "/v1/conversations/bad/messages"
    cases = [
        ({"messages": [{"role": "wizard", "content": "x"}]}, "InvalidMessageError",
         "messages[0].role"),
        ({"messages": [{"role": "user", "content": "x", "id": 7}]}, "InvalidMessageError",
         "messages[0].id"),
        ({"messages": []}, "RequestValidationError", "messages"),
        ({"messages": "hello"}, "RequestValidationError", "messages"),
        ({"messages": [{"role": "user", "content": "x"}], "extra": 1}, "RequestValidationError",
         "extra"),
    ]  # fmt: skip
    for body, title, field in cases:
        assert problem(a.post(url, json=body), 422, title)["field"] == field
    for raw in (b"{not json", b"\xff\xfe\x00garbage"):
        r = a.post(url, content=raw, headers={"content-type": "application/json"})
        problem(r, 422, "RequestValidationError")
    # strict: 0 is not false
    strict = a.post("/v1/conversations/bad/compact", json={"preview": 0})
    assert problem(strict, 422, "RequestValidationError")["field"] == "preview"
    # a method the path does not have: 405 naming every method it has
    wrong = httpx.request("PUT", str(a.base_url) + "/v1/conversations/bad")
    assert wrong.status_code == 405
    assert wrong.headers["allow"] == "DELETE, GET"
    problem(a.get("/v1/conversations/bad"), 404, "NotFoundError")  # nothing was created
    ctx = "/v1/conversations/bad/context"
    assert problem(a.post(ctx, json={"message": "hi", "budget": 0}), 422,
                   "RequestValidationError")["field"] == "budget"  # fmt: skip
    problem(a.post(ctx, json={"message": "hi", "format": "xml"}), 422, "RequestValidationError")
    problem(a.post(ctx, json={"message": "   "}), 422, "InvalidMessageError")
    problem(a.post(ctx, json={"message": "hi", "budget": 5}), 422, "BudgetError")
    problem(a.post(ctx, json={"message": "hi", "model": "no-such-model"}), 422, "ConfigError")
    problem(a.get("/v1/conversations/bad"), 404, "NotFoundError")  # still nothing written


def test_non_finite_numbers_answer_422_naming_the_field_and_write_nothing(
    a: httpx.Client,
) -> None:
    """Python's json reads NaN, Infinity and 1e400; standard JSON has none of them."""
    cases = [
        ("/v1/conversations", '{"id": "nan", "metadata": {"score": NaN}}', "metadata.score"),
        ("/v1/conversations", '{"id": "nan", "metadata": {"s": [1, 1e400]}}', "metadata.s[1]"),
        ("/v1/conversations/nan/messages",
         '{"messages": [{"role": "user", "content": "hi", "metadata": {"w": -Infinity}}]}',
         "messages[0].metadata.w"),
        ("/v1/conversations/nan/messages",
         '{"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t1", '
         '"name": "f", "input": {"x": NaN}}]}]}', "messages[0].content[0].input.x"),
        ("/v1/conversations/nan/context", '{"message": "hi", "budget": NaN}', "budget"),
        ("/v1/memories", '{"user": "nan", "content": "likes tea", "meta": {"w": Infinity}}',
         "meta.w"),
        ("/v1/knowledge", '{"text": "# T\\n\\nalpha", "source": "nan.md", "meta": {"w": NaN}}',
         "meta.w"),
    ]  # fmt: skip
    for url, raw, field in cases:
        r = a.post(url, content=raw.encode(), headers={"content-type": "application/json"})
        body = problem(r, 422, "RequestValidationError")
        assert body["field"] == field, body
        assert "standard JSON cannot hold" in body["detail"]
    # tool-call arguments are JSON inside a string: the message model refuses them
    call = {"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"x": NaN}'}}
    r = a.post("/v1/conversations/nan/messages",
               json={"messages": [{"role": "assistant", "content": None, "tool_calls": [call]}]})  # fmt: skip
    field = problem(r, 422, "InvalidMessageError")["field"]
    assert field == "messages[0].tool_calls[0].function.arguments['x']"
    problem(a.get("/v1/conversations/nan"), 404, "NotFoundError")  # nothing was written
    assert a.get("/v1/memories", params={"user": "nan"}).json() == {"memories": []}
    assert a.post("/v1/knowledge/search", json={"query": "alpha"}).json() == {"hits": []}
    # a finite number in the same places is kept as sent
    made = a.post("/v1/conversations", json={"id": "nan", "metadata": {"s": [1, 1e300, -0.5]}})
    assert made.status_code == 201
    assert a.get("/v1/conversations/nan").json()["metadata"] == {"s": [1, 1e300, -0.5]}


def test_oversize_bodies_answer_413(a: httpx.Client) -> None:
    big = {"messages": [{"role": "user", "content": "x" * MAX_BODY}]}
    problem(a.post("/v1/conversations/big/messages", json=big), 413, "BodyTooLarge")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds as it streams
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(MAX_BODY // 1024 + 1):
            yield b"y" * 1024
        yield b'"}]}'

    r = a.post(
        "/v1/conversations/big/messages", content=chunks(),
        headers={"content-type": "application/json"},
    )  # fmt: skip
    assert "content-length" not in r.request.headers
    problem(r, 413, "BodyTooLarge")
    problem(a.get("/v1/conversations/big"), 404, "NotFoundError")


# -- building, compaction, inspection ------------------------------------------------------


def test_build_in_each_format_records_receipts(a: httpx.Client) -> None:
    a.post("/v1/conversations/fmt/messages", json={"messages": chat(6, "fmt")})
    out = {}
    for fmt in ("openai", "anthropic", "responses"):
        r = a.post(
            "/v1/conversations/fmt/context",
            json={"message": f"and topic3 in {fmt}?", "budget": 2000, "format": fmt,
                  "model": "gpt-4o", "store_message": fmt == "openai"},
        )  # fmt: skip
        assert r.status_code == 200, r.text
        out[fmt] = r.json()
    openai = out["openai"]["request"]
    assert openai["model"] == "gpt-4o"
    assert openai["messages"][0]["role"] == "system"
    assert "and topic3 in openai?" in json.dumps(openai["messages"][-2:])
    assert out["anthropic"]["request"]["system"]
    assert out["anthropic"]["request"]["messages"]
    assert out["responses"]["request"]["input"]
    receipt = out["openai"]["receipt"]
    assert receipt["budget"] == 2000
    assert 0 < receipt["used"] <= 2000
    assert {b["status"] for b in receipt["blocks"]} <= {
        "included", "truncated", "dropped", "empty", "skipped", "failed", "timed_out",
    }  # fmt: skip
    assert a.get("/v1/conversations/fmt").json()["message_count"] == 7  # openai's only stored
    recorded = a.get("/v1/conversations/fmt/receipts", params={"limit": 2}).json()["receipts"]
    assert len(recorded) == 2
    assert recorded[0]["receipt"]["used"] == out["responses"]["receipt"]["used"]
    assert recorded[0]["at"] >= recorded[1]["at"]


def test_compact_preview_summary_log_recall_and_readback(a: httpx.Client) -> None:
    conv = "/v1/conversations/long"
    a.post(f"{conv}/messages", json={"messages": chat(60, "long")})
    big = "row " * 6000
    tools = [
        {"role": "assistant", "content": None, "id": "t1",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "query", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": big, "id": "t2"},
    ]  # fmt: skip
    a.post(f"{conv}/messages", json={"messages": tools})
    before = a.get(conv).json()
    preview = a.post(f"{conv}/compact", json={"preview": True}).json()
    assert preview["preview"] is True
    assert preview["original_count"] > 0
    assert a.get(conv).json()["version"] == before["version"]  # nothing written
    assert a.get(f"{conv}/compactions").json() == {"compactions": []}
    assert a.get(f"{conv}/summary").json()["summary"] is None
    done = a.post(f"{conv}/compact").json()
    assert done["applied"] is True
    assert done["summary_version"] == 1
    log = a.get(f"{conv}/compactions").json()["compactions"]
    assert len(log) == 1
    assert log[0]["tokens_before"] > log[0]["tokens_after"]
    view = a.get(f"{conv}/summary").json()
    assert view["summary"]["version"] == 1
    assert view["summary"]["content"]
    assert view["coverage"]["upto_seq"] == view["summary"]["upto_seq"]
    assert view["coverage"]["last_seq"] == 62
    hits = a.post(f"{conv}/recall", json={"query": "topic7", "limit": 3}).json()["hits"]
    assert hits
    assert hits[0]["seq"] == 8
    assert "topic7" in hits[0]["text"]
    built = a.post(f"{conv}/context", json={"message": "what did the query return?"}).json()
    found = re.search(r'key=\\"([^"\\]+)\\"', json.dumps(built["request"]))
    assert found, "the large tool result was offloaded behind a read-back key"
    page = a.get(f"{conv}/readback/{found.group(1)}", params={"page": 1}).json()
    assert "row row" in page["text"]
    assert page["page"] == 1
    problem(a.get(f"{conv}/readback/no-such-key"), 404, "NotFoundError")
    problem(a.get(f"{conv}/readback/{found.group(1)}", params={"page": 0}), 422,
            "RequestValidationError")  # fmt: skip


# -- memory and knowledge ------------------------------------------------------------------


def test_memory_round_trip_and_isolation(a: httpx.Client, b: httpx.Client) -> None:
    r = a.post("/v1/memories", json={
        "user": "mu", "content": "prefers green tea", "key": "drink", "importance": 80,
        "source_message_ids": ["msg-1"]})  # fmt: skip
    assert r.status_code == 201
    first = r.json()
    assert first["source_message_ids"] == ["msg-1"]
    second = a.post("/v1/memories", json={"user": "mu", "content": "prefers black coffee",
                                          "key": "drink"}).json()  # fmt: skip
    live = a.get("/v1/memories", params={"user": "mu"}).json()["memories"]
    assert [m["id"] for m in live] == [second["id"]]
    every = a.get("/v1/memories", params={"user": "mu", "include_superseded": True}).json()
    assert {m["id"] for m in every["memories"]} == {first["id"], second["id"]}
    hits = a.post("/v1/memories/search", json={"user": "mu", "query": "coffee"}).json()["hits"]
    assert hits[0]["memory"]["id"] == second["id"]
    # the memory is in the next build of the user's conversation (no stale cache)
    a.post("/v1/conversations", json={"id": "mem", "user": "mu"})
    built = a.post("/v1/conversations/mem/context", json={"message": "what do I drink?"}).json()
    assert "black coffee" in json.dumps(built["request"])
    # tenant B sees none of it
    assert b.get("/v1/memories", params={"user": "mu"}).json() == {"memories": []}
    assert b.post("/v1/memories/search", json={"user": "mu", "query": "coffee"}).json() == {
        "hits": []
    }
    problem(b.delete(f"/v1/memories/{second['id']}", params={"user": "mu"}), 404, "NotFoundError")
    gone = a.delete(f"/v1/memories/{second['id']}", params={"user": "mu"})
    assert gone.json() == {"id": second["id"], "deleted": True}
    built = a.post("/v1/conversations/mem/context", json={"message": "what do I drink?"}).json()
    assert "black coffee" not in json.dumps(built["request"])
    problem(a.delete(f"/v1/memories/{second['id']}", params={"user": "mu"}), 404, "NotFoundError")


def test_another_user_of_the_tenant_gets_nothing(a: httpx.Client) -> None:
    """Within one tenant, a conversation is its user's: another user's build is refused
    and stores nothing, and users' memories never mix."""
    a.post("/v1/conversations", json={"id": "own", "user": "uo"})
    a.post("/v1/conversations/own/messages",
           json={"messages": chat(2, "owned secret"), "user": "uo"})  # fmt: skip
    before = a.get("/v1/conversations/own").json()["message_count"]
    refused = a.post("/v1/conversations/own/context",
                     json={"message": "what is the secret?", "user": "intruder"})  # fmt: skip
    assert problem(refused, 422, "InvalidMessageError")["field"] == "user"
    assert a.get("/v1/conversations/own").json()["message_count"] == before
    a.post("/v1/memories", json={"user": "uo", "content": "the vault code is 7231"})
    assert a.get("/v1/memories", params={"user": "intruder"}).json() == {"memories": []}
    found = a.post("/v1/memories/search", json={"user": "intruder", "query": "vault code"})
    assert found.json() == {"hits": []}


def test_knowledge_ingest_search_build_and_isolation(a: httpx.Client, b: httpx.Client) -> None:
    doc = "# Returns\n\nThe refund window is 30 days from delivery.\n\n## Damaged\n\nSend a photo."
    r = a.post("/v1/knowledge", json={"text": doc, "source": "returns.md"})
    assert r.status_code == 201
    assert r.json()["chunks"] >= 1
    hits = a.post("/v1/knowledge/search", json={"query": "refund window"}).json()["hits"]
    assert hits[0]["source"] == "returns.md"
    assert "30 days" in hits[0]["content"]
    assert b.post("/v1/knowledge/search", json={"query": "refund window"}).json() == {"hits": []}
    built = a.post(
        "/v1/conversations/kn/context", json={"message": "how long is the refund window?"}
    )
    assert "30 days" in json.dumps(built.json()["request"])
    other = b.post(
        "/v1/conversations/kn/context", json={"message": "how long is the refund window?"}
    )
    assert "30 days" not in json.dumps(other.json()["request"])


# -- metrics -------------------------------------------------------------------------------


def test_metrics_count_builds_and_errors_without_tenant_data(
    a: httpx.Client, served: Served
) -> None:
    a.post("/v1/conversations/met/context", json={"message": "hello there"})
    a.get("/v1/conversations/no-such-conversation-xyz")
    text = httpx.get(served.url + "/metrics").text
    assert re.search(r'contextwright_build_seconds_count\{format="openai"\} [1-9]', text)
    assert re.search(r'contextwright_build_section_tokens_count\{section="[a-z_]+"\} [1-9]', text)
    assert re.search(r'contextwright_errors_total\{type="NotFoundError"\} [1-9]', text)
    assert 'route="/v1/conversations/{conversation}/context"' in text
    assert "contextwright_cache_hits_total" in text
    for private in ("tenant-a", "met", "no-such-conversation-xyz", "mu", "u1"):
        assert f'"{private}"' not in text


def test_every_response_was_checked_against_the_schema(check: SpecCheck) -> None:
    assert check.checked > 90


def test_paths_are_documented_in_docs(served: Served) -> None:
    docs = Path(__file__).resolve().parents[1] / "docs" / "service.md"
    text = docs.read_text()
    for path in SpecCheck(served.url).spec["paths"]:
        assert path in text, f"{path} is not in docs/service.md"
