"""The dashboard at ``/`` in headless Chromium, against the real server with the emulator as provider.

Chromium is Debian's (``apt-get install chromium``); Playwright only drives it. Each test runs
its own server in a thread on a fresh SQLite database and watches what a user would see: the
empty state, runs and their progress, a run's step timeline and an agent's memory, the page
updating by itself while a run goes on, and the sign-in form of a password-protected server.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, ConsoleMessage, Locator, Page, Request, async_playwright, expect

from nightshift.api.app import create_app
from nightshift.config import Settings
from nightshift.emulator import EmulatorAdmin
from nightshift.serving import running_server
from support.runs import Runs

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
PASSWORD = "correct horse battery staple"

# A browser test needs one database, not both: the API itself is tested on SQLite and PostgreSQL.
pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: apt-get install chromium"
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


def _settings(tmp_path: Path, db_url: str) -> Settings:
    return Settings(home=tmp_path / "home", database_url=db_url, poll_interval_seconds=0.1)


@pytest.fixture
def base_url(tmp_path: Path, db_url: str, emulator: str) -> Iterator[str]:
    """A real server (uvicorn in a thread) whose provider is the emulator."""
    with running_server(create_app(_settings(tmp_path, db_url))) as url:
        yield url


@pytest.fixture
async def runs(base_url: str) -> AsyncIterator[Runs]:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        yield Runs(client)


@dataclass
class Watched:
    """A page with what it did: every request it made, its uncaught errors and console errors."""

    page: Page
    requests: list[Request] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def api_calls(self, path: str) -> list[Request]:
        return [r for r in self.requests if httpx.URL(r.url).path == path]

    def assert_clean(self, base_url: str) -> None:
        """Nothing left this server (no CDN fonts or scripts) and no script failed."""
        foreign = [r.url for r in self.requests if not r.url.startswith(base_url)]
        assert foreign == [], foreign
        assert self.errors == [], self.errors


async def _open(browser: Browser, *, allow_401: bool = False) -> Watched:
    page = await browser.new_page(viewport={"width": 1360, "height": 900})
    watched = Watched(page)
    page.on("request", lambda request: watched.requests.append(request))
    page.on("pageerror", lambda error: watched.errors.append(f"page error: {error}"))

    def console(message: ConsoleMessage) -> None:
        # Chromium logs every 4xx of fetch as "Failed to load resource"; a 401 is how the page
        # learns that it needs a key.
        if message.type == "error" and not (allow_401 and "401" in message.text):
            watched.errors.append(f"console: {message.text}")

    page.on("console", console)
    return watched


async def _screenshot(page: Page, name: str) -> None:
    """Save what the page shows to tests/artifacts/ (git-ignored), to look at after a run."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def _run_row(page: Page, run_id: str) -> Locator:
    return page.locator(f'tr[data-run-id="{run_id}"]')


async def _finished_run(runs: Runs, names: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    agents = [await runs.agent(name) for name in names]
    run = await runs.start(
        [{"agent_id": a["id"], "messages": [{"role": "user", "content": "hello there"}]} for a in agents],
        metadata={"name": "greetings"},
    )
    done = await runs.wait(run["id"])
    assert done["status"] == "completed", done
    return done, agents


async def test_the_page_loads_with_the_empty_state(browser: Browser, base_url: str) -> None:
    watched = await _open(browser)
    page = watched.page
    response = await page.goto(base_url)
    assert response is not None and response.status == 200
    assert "nightshift" in await page.title()
    await expect(page.locator(".empty h2")).to_have_text("No runs yet")
    # The curl that starts a run, pointed at this very server.
    await expect(page.locator(".empty")).to_contain_text(f"curl -s {base_url}/v1/messages/batches")
    await expect(page.locator("#version")).to_have_text(re.compile(r"^v\d"))
    await expect(page.locator("#live")).to_contain_text("all runs final")
    await _screenshot(page, "dashboard-empty.png")

    # A run that does not exist: the server's answer, in plain words, and the way back.
    await page.goto(f"{base_url}/#/runs/batch-nope")
    await expect(page.locator(".error-panel h2")).to_have_text("Not found")
    await expect(page.locator(".error-panel")).to_contain_text("HTTP 404: batch run batch-nope not found")
    await page.locator(".error-panel a").click()
    await expect(page.locator(".empty h2")).to_have_text("No runs yet")
    watched.errors = [e for e in watched.errors if "404" not in e]  # Chromium logs the 404 fetch
    watched.assert_clean(base_url)


async def test_a_finished_run_its_timeline_and_an_agents_memory(browser: Browser, base_url: str, runs: Runs) -> None:
    done, agents = await _finished_run(runs, ["ada", "grace", "linus"])
    watched = await _open(browser)
    page = watched.page
    await page.goto(base_url)

    row = _run_row(page, done["id"])
    await expect(row.locator(".badge")).to_have_text("completed")
    await expect(row.locator(".progress-count")).to_have_text("3 / 3")
    await expect(row.locator(".progress-percent")).to_have_text("100%")
    await expect(row).to_contain_text("name: greetings")
    await expect(row).to_contain_text("without batch")

    await row.locator("a.run-id").click()
    await expect(page.locator(".run-title")).to_have_text(done["id"])
    await expect(page.locator(".run-head .badge")).to_have_text("completed")
    cost = done["progress"]["cost_usd"]
    await expect(page.locator(".cards")).to_contain_text(f"${cost:.4f}" if cost < 0.01 else f"${cost:.2f}")
    # What the batch and the prompt cache saved, side by side (the cache can lose money).
    batch_saved, cache_saved = done["progress"]["batch_savings_usd"], done["progress"]["cache_savings_usd"]
    await expect(page.locator(".cards .batch-saved")).to_have_text(f"batch saved {_usd(batch_saved)}")
    await expect(page.locator(".cards .cache-saved")).to_have_text(f"prompt cache saved {_usd(cache_saved)}")

    # The step timeline: one provider batch (every agent is on Anthropic), applied, 3 succeeded.
    batch = page.locator(".batch-row")
    await expect(batch).to_have_count(1)
    await expect(batch).to_contain_text("anthropic")
    await expect(batch.locator(".badge")).to_have_text("applied")
    await expect(batch.locator(".count-succeeded")).to_have_text("3 succeeded")
    await expect(batch.locator(".gantt-bar")).to_be_visible()

    # The agents, from the run's messages; each agent's last words show without a click.
    await expect(page.locator(".agent")).to_have_count(3)
    ada = page.locator(f'.agent[data-agent-id="{agents[0]["id"]}"]')
    await expect(ada.locator(".badge")).to_have_text("finished")
    await expect(ada.locator(".preview")).to_contain_text("says")

    # Its memory and its messages in this run, on click.
    await ada.locator(".agent-head").click()
    await expect(ada.locator(".agent-title")).to_contain_text("ada")
    await expect(ada.locator('.block[data-label="persona"] .block-value')).to_have_text("I am ada.")
    await expect(ada.locator('.block[data-label="human"] .block-value')).to_have_text("Nothing known yet.")
    await expect(ada.locator(".transcript .line-user")).to_contain_text("hello there")
    await expect(ada.locator(".transcript .line-says")).to_have_count(1)

    await _screenshot(page, "dashboard.png")

    await page.locator("a.back").click()
    await expect(_run_row(page, done["id"])).to_be_visible()
    await _screenshot(page, "dashboard-runs.png")
    watched.assert_clean(base_url)


async def test_the_page_follows_a_running_run_without_reloading(
    browser: Browser, base_url: str, runs: Runs, admin: EmulatorAdmin
) -> None:
    agents = [await runs.agent(name) for name in ("ada", "grace")]
    # The emulator copies its timing into each batch as it is created, so this batch stays in
    # progress for 6 s whatever happens later: time enough to watch it from the page.
    await admin.configure(seconds_to_end=6)
    run = await runs.start([{"agent_id": a["id"], "input": "hi"} for a in agents])
    watched = await _open(browser)
    page = watched.page
    await page.goto(base_url)
    await page.evaluate("window.sameDocument = true")

    row = _run_row(page, run["id"])
    await expect(row.locator(".badge")).to_have_text(re.compile("created|running"))
    await expect(page.locator("#live")).to_contain_text("Live")

    # Into the run while it is in progress: its provider batch is still processing.
    await row.locator("a.run-id").click()
    await expect(page.locator(".run-head .badge")).to_have_text("running")
    await expect(page.locator(".batch-row .count-processing")).to_have_text(re.compile(r"^[12] processing$"))
    await expect(page.locator(".run-meta")).to_contain_text("running for")

    # The page polls: the run completes on screen, with no reload.
    await expect(page.locator(".run-head .badge")).to_have_text("completed", timeout=30_000)
    await expect(page.locator(".cards .card-value").first).to_have_text("100%")
    await expect(page.locator(".batch-row .badge")).to_have_text("applied")
    await expect(page.locator(".agent")).to_have_count(2)
    await page.locator("a.back").click()
    await expect(row.locator(".badge")).to_have_text("completed")
    await expect(row.locator(".progress-percent")).to_have_text("100%")
    assert await page.evaluate("window.sameDocument") is True

    # Every run shown is final: polling stops.
    await expect(page.locator("#live")).to_contain_text("all runs final")
    calls = len(watched.api_calls("/v1/messages/batches"))
    await page.wait_for_timeout(2500)
    assert len(watched.api_calls("/v1/messages/batches")) == calls
    watched.assert_clean(base_url)


@pytest.fixture
def protected_url(tmp_path: Path, db_url: str, emulator: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A server started with NIGHTSHIFT_SERVER_PASSWORD set."""
    monkeypatch.setenv("NIGHTSHIFT_SERVER_PASSWORD", PASSWORD)
    settings = _settings(tmp_path, db_url)
    assert settings.server_password is not None
    with running_server(create_app(settings)) as url:
        yield url


async def test_a_protected_server_asks_for_the_key_then_shows_the_runs(browser: Browser, protected_url: str) -> None:
    headers = {"Authorization": f"Bearer {PASSWORD}"}
    async with httpx.AsyncClient(base_url=protected_url, headers=headers, timeout=30) as client:
        done, _ = await _finished_run(Runs(client), ["ada"])
    watched = await _open(browser, allow_401=True)
    page = watched.page
    await page.goto(protected_url)

    form = page.locator("form.auth")
    await expect(form).to_contain_text("needs an API key or the server password")
    await expect(page.locator("#live")).to_contain_text("Locked")

    # A wrong key is refused, the form says so, and the key is not kept.
    await page.fill("#api-key", "not the password")
    await page.click("form.auth button[type=submit]")
    await expect(form).to_contain_text("did not accept that key")
    assert await page.evaluate("localStorage.getItem('nightshift.apiKey')") is None
    await expect(page.locator("#forget")).to_be_hidden()
    await _screenshot(page, "dashboard-sign-in.png")

    await page.fill("#api-key", PASSWORD)
    await page.click("form.auth button[type=submit]")
    row = _run_row(page, done["id"])
    await expect(row.locator(".badge")).to_have_text("completed")
    assert await page.evaluate("localStorage.getItem('nightshift.apiKey')") == PASSWORD
    await expect(page.locator("#forget")).to_be_visible()

    # Kept across a reload; every call since the key was given carries it.
    await page.reload()
    await expect(_run_row(page, done["id"]).locator(".badge")).to_have_text("completed")
    await _run_row(page, done["id"]).locator("a.run-id").click()
    await expect(page.locator(".batch-row")).to_have_count(1)
    authorized = [r for r in watched.requests if "/v1/" in r.url and "/v1/health" not in r.url]
    last_refused = max(i for i, r in enumerate(authorized) if r.headers.get("authorization") != f"Bearer {PASSWORD}")
    after = authorized[last_refused + 1 :]
    assert after and all(r.headers.get("authorization") == f"Bearer {PASSWORD}" for r in after)

    # Forgetting the key brings the form back.
    await page.locator("#forget").click()
    await expect(page.locator("form.auth")).to_be_visible()
    watched.assert_clean(protected_url)


def _usd(value: float) -> str:
    """Dollars as the dashboard writes them (``formatUsd``, with the sign first)."""
    amount = abs(value)
    text = "$0" if amount == 0 else f"${amount:.4f}" if amount < 0.01 else f"${amount:.2f}"
    return f"-{text}" if value < 0 else text
