"""The inspector page (``/inspect``) in real headless Chromium (issue #21, part 4).

Playwright's Python API drives Debian's ``/usr/bin/chromium`` against a real
uvicorn server on loopback whose SQLite file holds a seeded conversation, long
enough that a small-budget build leaves a block out. A user enters a key (a
wrong one first), picks the conversation, builds now, and sees the section bar
and the dropped block's reason; text from users and memories that looks like
HTML renders as text and runs nothing; ``--insecure-single-tenant`` asks for no
key; every page answer carries a strict Content-Security-Policy, and the page
raises no error and violates no policy. Screenshots go to each test's temp dir.
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

from .http_kit import Served, add_key, client, serving

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
XSS = '<img src=x onerror="alert(document.domain)"><script>alert(2)</script>'
QUESTION = "Who approves the project budget for project 3?"

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is absent (apt-get install chromium)"
)


def seed(c: httpx.Client) -> None:
    """c1: 80 turns, a memory with provenance, a knowledge page; c2: a short one."""
    assert c.post("/v1/conversations", json={"id": "c1", "user": "ann"}).status_code == 201
    turns: list[dict[str, Any]] = []
    for i in range(40):
        turns.append({"role": "user", "id": f"u{i}", "content": f"Turn {i}: the budget for "
                      f"project {i} is {i * 1000} dollars; deadline in week {i}."})  # fmt: skip
        turns.append({"role": "assistant", "id": f"a{i}",
                      "content": f"Noted: project {i}, {i * 1000} dollars, week {i}. " * 3})  # fmt: skip
    turns.append({"role": "user", "id": "xss", "content": f"look at this {XSS}"})
    r = c.post("/v1/conversations/c1/messages", json={"messages": turns})
    assert r.status_code == 200, r.text
    memory = {"user": "ann", "content": "Ann's project 3 budget was approved by finance",
              "source_message_ids": ["u3", "a3"]}  # fmt: skip
    assert c.post("/v1/memories", json=memory).status_code == 201
    assert c.post("/v1/memories", json={"user": "ann", "content": XSS}).status_code == 201
    doc = "# Budgets\n\n" + "Project budgets are approved by the finance team every quarter. " * 40
    assert c.post("/v1/knowledge", json={"source": "handbook.md", "text": doc}).status_code == 201
    short = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
    assert c.post("/v1/conversations/c2/messages", json={"messages": short}).status_code == 200


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, str]]:
    db = str(tmp_path_factory.mktemp("inspect") / "service.db")
    key, other = add_key(db, "acme"), add_key(db, "rival")
    with serving(Settings(db=db, system_prompt="You help with budgets.")) as s:
        with client(s.url, key) as c:
            seed(c)
        with client(s.url, other) as c:  # another tenant's: never listed for acme
            c.post("/v1/conversations", json={"id": "rival-secret"}).raise_for_status()
        yield s, key


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


class Watched:
    """A page, and everything it reported: console errors (CSP violations), page errors, dialogs."""

    def __init__(self, browser: Any) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.page.set_default_timeout(15_000)
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

        def dialog(d: Any) -> None:
            self.dialogs.append(d.message)
            d.dismiss()

        self.page.on("dialog", dialog)

    def _console(self, message: Any) -> None:
        # Chromium logs every 4xx fetch; a refused key (401) is part of the story here
        if message.type == "error" and "status of 401" not in message.text:
            self.errors.append(message.text)


@pytest.fixture
def watched(browser: Any) -> Iterator[Watched]:
    w = Watched(browser)
    try:
        yield w
    finally:
        w.context.close()
    assert w.dialogs == [], f"a dialog fired: {w.dialogs}"
    assert w.errors == [], f"the page reported errors: {w.errors}"


def login(page: Any, url: str, key: str) -> None:
    page.goto(url + "/inspect")
    page.locator("#key").fill(key)
    page.locator("#key-form button[type=submit]").click()
    page.locator("#conversations .conv").first.wait_for()


def test_key_pick_build_shows_bar_and_dropped_reason(
    served: tuple[Served, str], watched: Watched, tmp_path: Path
) -> None:
    s, key = served
    page = watched.page
    page.goto(s.url + "/inspect")
    assert page.locator("#login").is_visible()
    assert not page.locator("#app").is_visible()
    page.locator("#key").fill("cw_000000000000_" + "x" * 43)  # well-formed, unknown
    page.locator("#key-form button[type=submit]").click()
    page.get_by_text("That key was refused").wait_for()
    login(page, s.url, key)
    ids = page.locator("#conversations .conv strong").all_text_contents()
    assert set(ids) == {"c1", "c2"}, ids  # not the other tenant's
    page.locator(".conv[data-id=c1]").click()
    page.get_by_text("No builds yet").wait_for()

    page.locator("[data-tab=build]").click()
    page.locator("#build-message").fill(QUESTION)
    page.locator("#build-budget").fill("300")
    page.locator("#build-form button[type=submit]").click()
    result = page.locator("#build-result")
    result.locator("[data-testid=section-bar] .seg").first.wait_for()
    sections = result.locator("[data-testid=section-bar] .seg[data-section]")
    names = [sections.nth(i).get_attribute("data-section") for i in range(sections.count())]
    assert {"summary", "recent", "input"} <= set(names), names
    widths = page.eval_on_selector_all(
        "#build-result [data-testid=section-bar] .seg", "els => els.map(e => e.offsetWidth)"
    )
    bar = page.eval_on_selector("#build-result [data-testid=section-bar]", "e => e.clientWidth")
    assert all(w > 0 for w in widths[:-1])
    assert sum(widths) <= bar + len(widths)
    dropped = result.locator("[data-testid=left-out] .dropped-block")
    assert dropped.count() >= 1
    text = dropped.first.text_content() or ""
    assert "current_goal" in text, text
    assert "no room left" in text, text
    assert result.locator("tr.row-dropped td.reason").first.text_content() == "no room left"
    assert QUESTION in (result.locator("[data-testid=request]").text_content() or "")
    page.screenshot(path=str(tmp_path / "build-now.png"), full_page=True)

    page.locator("[data-tab=receipts]").click()
    page.locator("#receipt-list tr.pickable").first.wait_for()
    assert page.locator("#receipt-list td.bad").first.text_content() == "1"
    page.locator("#receipt-view [data-testid=section-bar]").wait_for()
    for tab in ("window", "summary", "compactions", "memories"):
        page.locator(f"[data-tab={tab}]").click()
        page.locator(f"#tab-{tab}").wait_for()
    page.get_by_text("u3, a3").wait_for()  # the memory's provenance
    page.locator("[data-tab=compactions]").click()
    assert re.search(r"\d → \d", page.locator("#compaction-rows").text_content() or "")
    page.locator("[data-tab=summary]").click()
    page.get_by_text("covers messages up to seq").wait_for()
    page.screenshot(path=str(tmp_path / "summary.png"), full_page=True)

    # the key: in this tab's sessionStorage, never in a URL or the server's log
    assert page.evaluate("sessionStorage.getItem('contextwright.key')") == key
    assert key not in page.url
    page.reload()
    page.locator("#conversations .conv").first.wait_for()  # a reload keeps key and pick
    page.locator("#conv-title").get_by_text("c1").wait_for()
    leaked = [line for line in s.logs if key[16:] in line]  # the secret, after cw_<id>_
    assert leaked == []


def test_untrusted_text_renders_as_text(
    served: tuple[Served, str], watched: Watched, tmp_path: Path
) -> None:
    s, key = served
    page = watched.page
    login(page, s.url, key)
    page.locator(".conv[data-id=c1]").click()
    page.locator("[data-tab=window]").click()
    shown = page.locator("#win-rows div.text", has_text="look at this")
    assert shown.text_content() == f"look at this {XSS}"
    page.screenshot(path=str(tmp_path / "window.png"), full_page=True)
    page.locator("[data-tab=memories]").click()
    page.locator("#memory-rows div.text", has_text="onerror").wait_for()
    page.locator("[data-tab=build]").click()
    page.locator("#build-message").fill(XSS)
    page.locator("#build-budget").fill("2000")
    page.locator("#build-form button[type=submit]").click()
    page.locator("#build-result [data-testid=request]").wait_for(state="attached")
    request = page.locator("#build-result [data-testid=request]").text_content() or ""
    assert json.dumps(XSS)[1:-1] in request  # the user message, as JSON text
    page.screenshot(path=str(tmp_path / "xss.png"), full_page=True)
    # nothing was parsed as markup: no image or script element came from the data
    assert page.locator("img").count() == 0
    assert page.locator("script").count() == 1  # the page's own
    assert page.evaluate("document.body.innerHTML.includes('<img')") is False


def test_insecure_single_tenant_asks_no_key(tmp_path: Path, watched: Watched) -> None:
    settings = Settings(db=str(tmp_path / "open.db"), insecure_single_tenant=True, budget=2000)
    with serving(settings) as s:
        with client(s.url, None) as c:
            assert c.post("/v1/conversations/solo/messages", json={
                "messages": [{"role": "user", "content": "hi"}]}).status_code == 200  # fmt: skip
        page = watched.page
        page.goto(s.url + "/inspect")
        page.locator(".conv[data-id=solo]").wait_for()
        assert not page.locator("#login").is_visible()
        assert "no authentication" in (page.locator("#mode").text_content() or "")
        page.locator(".conv[data-id=solo]").click()
        page.locator("[data-tab=build]").click()
        page.locator("#build-message").fill("hello again")
        page.locator("#build-form button[type=submit]").click()
        page.locator("#build-result [data-testid=section-bar]").wait_for()


def test_page_answers_carry_a_strict_policy(served: tuple[Served, str]) -> None:
    s, _ = served
    with httpx.Client(base_url=s.url) as c:
        for path, ctype in [
            ("/inspect", "text/html"),
            ("/inspect/static/inspect.js", "text/javascript"),
            ("/inspect/static/inspect.css", "text/css"),
        ]:
            r = c.get(path)
            assert r.status_code == 200
            assert r.headers["content-type"].startswith(ctype)
            csp = r.headers["content-security-policy"]
            assert "script-src 'self'" in csp
            assert "default-src 'none'" in csp
            assert "unsafe" not in csp
            assert r.headers["x-content-type-options"] == "nosniff"
        assert c.get("/inspect/static/../_app.py").status_code == 404
        assert c.get("/inspect/static/inspect.html").status_code == 404
        paths = c.get("/openapi.json").json()["paths"]
        assert not any(p.startswith("/inspect") for p in paths)
    js = Path(__file__).resolve().parents[1] / "src/contextwright/interfaces/http/static"
    script = (js / "inspect.js").read_text()
    assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(", script)
