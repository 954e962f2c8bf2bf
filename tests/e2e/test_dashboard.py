"""The dashboard at ``/`` in headless Chromium, against the real server with the emulator as provider.

Chromium is Debian's (``apt-get install chromium``); Playwright only drives it. Each test runs
its own server in a thread on a fresh SQLite database and watches what a user would see: the
empty state, runs by name and their progress, a run's cost and throughput chart, its step
timeline, its agents by name with their tokens and cost and memory, a failed agent's step, the
agents view, the cancel button, the page updating by itself while a run goes on, and the sign-in
form of a password-protected server. Steps are counted from 1 and money rounded as in the CLI.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import Browser, ConsoleMessage, Dialog, Locator, Page, Request, async_playwright, expect
from sqlalchemy import update

from nightshift.api.app import create_app
from nightshift.batch.steps import EVERY_AGENT_DELETED, queue_batch_run
from nightshift.cli_commands.views import money, saving
from nightshift.config import Settings
from nightshift.domain.batches import BatchRunRequest
from nightshift.domain.messages import UserInput
from nightshift.domain.orgs import DEFAULT_ORG_ID
from nightshift.emulator import EmulatorAdmin
from nightshift.emulator.config import ScriptedError, ScriptedReply, ScriptedToolCall
from nightshift.services.agents import delete_agent
from nightshift.serving import running_server
from nightshift.store.db import opened
from nightshift.store.tables import tools
from support.api import create_tool
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
# One Chromium serves the module (each page opens in a browser context of its own: no cookie or
# storage is shared), so the tests and their async fixtures run on the module's event loop.
pytestmark = [
    pytest.mark.parametrize("db_url", ["sqlite"], indirect=True),
    pytest.mark.slow,
    pytest.mark.asyncio(loop_scope="module"),
]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: apt-get install chromium"
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest_asyncio.fixture(loop_scope="module", autouse=True)
async def _close_pages(browser: Browser) -> AsyncIterator[None]:
    """Close what the test opened: a page left open would go on polling its stopped server."""
    yield
    for context in browser.contexts:
        await context.close()


def _settings(tmp_path: Path, db_url: str) -> Settings:
    return Settings(home=tmp_path / "home", database_url=db_url, poll_interval_seconds=0.1)


@pytest.fixture
def base_url(tmp_path: Path, db_url: str, emulator: str) -> Iterator[str]:
    """A real server (uvicorn in a thread) whose provider is the emulator."""
    with running_server(create_app(_settings(tmp_path, db_url))) as url:
        yield url


@pytest_asyncio.fixture(loop_scope="module")
async def runs(base_url: str, tls_context: ssl.SSLContext) -> AsyncIterator[Runs]:
    async with httpx.AsyncClient(base_url=base_url, timeout=30, verify=tls_context) as client:
        yield Runs(client)


@pytest_asyncio.fixture(loop_scope="module")
async def admin(emulator: str) -> AsyncIterator[EmulatorAdmin]:
    """The emulator's admin client, on the module's event loop."""
    async with EmulatorAdmin(emulator) as client:
        yield client


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


async def _run_agent(runs: Runs, run_id: str, agent_id: str) -> dict[str, Any]:
    """The agent's line in ``GET /v1/messages/batches/{id}/agents``."""
    found = (await runs.client.get(f"/v1/messages/batches/{run_id}/agents")).json()["agents"]
    (line,) = [a for a in found if a["agent_id"] == agent_id]
    return dict(line)


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
    # The run by its name (metadata.name), its id beside it.
    await expect(row.locator(".run-name")).to_have_text("greetings")
    await expect(row.locator(".run-id")).to_have_text(done["id"])
    await expect(row).to_contain_text("without batch")
    await expect(row.locator(".cost")).to_have_text(money(done["progress"]["cost_usd"]))

    await row.locator("a.run-id").click()
    await expect(page.locator(".run-head .run-name")).to_have_text("greetings")
    await expect(page.locator(".run-title")).to_have_text(done["id"])
    await expect(page.locator(".run-head .badge")).to_have_text("completed")
    await expect(page.locator(".cancel-run")).to_have_count(0)  # nothing to cancel
    # Money rounded as the CLI rounds it.
    await expect(page.locator(".cards")).to_contain_text(money(done["progress"]["cost_usd"]))

    # The cost and throughput chart: one bar each for the one step, which cost what the run did.
    cost_bar = page.locator(".chart-cost .chart-bar")
    await expect(cost_bar).to_have_count(1)
    await expect(cost_bar).to_have_attribute("data-step", "1")
    assert float(await cost_bar.get_attribute("data-value") or "0") == pytest.approx(done["progress"]["cost_usd"])
    await expect(page.locator(".chart-cost .chart-value")).to_have_text(money(done["progress"]["cost_usd"]))
    await expect(page.locator(".chart-throughput .chart-bar")).to_have_count(1)
    assert float(await page.locator(".chart-throughput .chart-bar").get_attribute("data-value") or "0") > 0
    # What the batch and the prompt cache saved, side by side (the cache can lose money).
    batch_saved, cache_saved = done["progress"]["batch_savings_usd"], done["progress"]["cache_savings_usd"]
    await expect(page.locator(".cards .batch-saved")).to_have_text(saving(batch_saved, "batch"))
    await expect(page.locator(".cards .cache-saved")).to_have_text(saving(cache_saved, "prompt cache"))

    # The step timeline: one provider batch (every agent is on Anthropic), applied, 3 succeeded.
    batch = page.locator(".batch-row")
    await expect(batch).to_have_count(1)
    await expect(batch).to_contain_text("anthropic")
    await expect(batch.locator(".badge")).to_have_text("applied")
    await expect(batch.locator(".count-succeeded")).to_have_text("3 succeeded")
    await expect(batch.locator(".gantt-bar")).to_be_visible()

    # The agents by name; each agent's state, step and last words show without a click.
    await expect(page.locator(".agent")).to_have_count(3)
    await expect(page.locator(".agent .agent-name")).to_have_text(["ada", "grace", "linus"])
    ada = page.locator(f'.agent[data-agent-id="{agents[0]["id"]}"]')
    await expect(ada.locator(".agent-id")).to_have_text(agents[0]["id"])
    await expect(ada.locator(".badge")).to_have_text("finished")
    await expect(ada.locator(".agent-step")).to_have_text("step 1")
    await expect(ada.locator(".preview")).to_contain_text("says")

    # Its tokens and cost in this run, its memory and its messages in this run, on click.
    await ada.locator(".agent-head").click()
    await expect(ada.locator(".agent-title")).to_contain_text("ada")
    spent = await _run_agent(runs, done["id"], agents[0]["id"])
    usage = spent["usage"]
    tokens_in = sum(usage.get(k, 0) for k in ("input_tokens", "cache_read_tokens", "cache_write_tokens"))
    spend = ada.locator(".spend")
    await expect(spend.locator(".spend-item")).to_have_text(
        [
            "Steps answered1",
            f"Tokens in{tokens_in:,}",
            f"Tokens out{usage['output_tokens']:,}",
            f"Cost{money(spent['cost_usd'])}",
            f"Without batch{money(spent['cost_without_batch_usd'])}",
        ]
    )
    assert tokens_in > 0 and spent["cost_usd"] > 0
    await expect(ada.locator('.block[data-label="persona"] .block-value')).to_have_text("I am ada.")
    await expect(ada.locator('.block[data-label="human"] .block-value')).to_have_text("Nothing known yet.")
    await expect(ada.locator(".transcript .line-user")).to_contain_text("hello there")
    await expect(ada.locator(".transcript .line-says")).to_have_count(1)

    await _screenshot(page, "dashboard.png")

    await page.locator("a.back").click()
    await expect(_run_row(page, done["id"])).to_be_visible()
    await _screenshot(page, "dashboard-runs.png")
    watched.assert_clean(base_url)


async def test_a_run_taken_over_for_its_deadline_says_so_and_what_it_cost(
    browser: Browser, base_url: str, runs: Runs, admin: EmulatorAdmin
) -> None:
    # Half of each batch held back an hour, and two seconds to finish in: the batch is cancelled
    # at its first poll past the first second, its stragglers sent through the normal API.
    await admin.configure(held_back_fraction=0.5)
    agents = [await runs.agent(f"hurried-{i}") for i in range(12)]  # some held back, not all (but 1 in 2,000)
    run = await runs.start(
        [{"agent_id": a["id"], "messages": [{"role": "user", "content": "hello there"}]} for a in agents],
        finish_within_seconds=2,
    )
    done = await runs.wait(run["id"])
    assert done["status"] == "completed", done
    (batch,) = done["progress"]["provider_batches"]
    assert 0 < batch["taken_over"] < 12 and done["progress"]["takeover_usd"] > 0, done

    watched = await _open(browser)
    page = watched.page
    await page.goto(f"{base_url}/#/runs/{done['id']}")
    await expect(page.locator(".batch-row .taken-over")).to_have_text(
        f"{batch['taken_over']} taken over for the deadline"
    )
    await expect(page.locator(".cards .takeover-cost")).to_have_text(
        f"deadline take-over {money(done['progress']['takeover_usd'])}"
    )
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


async def test_a_failed_agent_shows_its_step_and_the_agents_view_lists_agents(
    browser: Browser, base_url: str, runs: Runs, admin: EmulatorAdmin
) -> None:
    ok, bad = await runs.agent("ok"), await runs.agent("bad")
    # "bad" answers its first step, then the provider refuses its second: it fails at step 2
    # (the API's step_number 1).
    search = ScriptedToolCall(name="conversation_search", arguments={"query": "hi"}, request_heartbeat=True)
    refused = ScriptedError(type="invalid_request_error", message="prompt too odd")
    await admin.script(bad["id"], ScriptedReply(tool_call=search), ScriptedReply(error=refused))
    run = await runs.start(
        [{"agent_id": a["id"], "input": "hello"} for a in (ok, bad)], metadata={"name": "nightly", "team": "qa"}
    )
    done = await runs.wait(run["id"])
    assert done["status"] == "completed", done
    (failure,) = done["progress"]["failures"]
    assert (failure["agent_id"], failure["step_number"]) == (bad["id"], 1)

    watched = await _open(browser)
    page = watched.page
    await page.goto(base_url)
    row = _run_row(page, done["id"])
    await expect(row.locator(".run-name")).to_have_text("nightly")
    await expect(row.locator(".run-metadata")).to_have_text("team: qa")
    await expect(row.locator("td.num").first).to_contain_text("2")  # the step column: two steps

    await row.locator("a.run-id").click()
    # The failed agents, by name, at the step people count.
    failed = page.locator(".section", has_text="Failed agents").locator("tbody tr")
    await expect(failed).to_have_count(1)
    await expect(failed.locator(".agent-name")).to_have_text("bad")
    await expect(failed.locator("td.num")).to_have_text("2")
    await expect(failed).to_contain_text("prompt too odd")
    await expect(page.locator(".batch-row td.num:first-child")).to_have_text(["1", "2"])
    await expect(page.locator(".chart-cost .chart-bar")).to_have_count(2)
    steps = [await bar.get_attribute("data-step") for bar in await page.locator(".chart-cost .chart-bar").all()]
    assert steps == ["1", "2"]

    agent = page.locator(f'.agent[data-agent-id="{bad["id"]}"]')
    await expect(agent.locator(".badge")).to_have_text("failed")
    await expect(agent.locator(".agent-step")).to_have_text("step 2")
    await expect(agent.locator(".preview")).to_contain_text("failed at step 2")
    await agent.locator(".agent-head").click()
    await expect(agent.locator(".agent-failure")).to_contain_text("Failed at step 2: ")
    await expect(agent.locator(".agent-failure")).to_contain_text("prompt too odd")
    await _screenshot(page, "dashboard-failed-agent.png")

    # The agents view, outside any run: every agent, newest first, its memory and tools on click.
    await page.locator('.nav a[data-view="agents"]').click()
    await expect(page.locator(".page-head h1")).to_have_text("Agents")
    await expect(page.locator('.nav a[data-view="agents"]')).to_have_attribute("aria-current", "page")
    listed = page.locator(".agent-list .agent")
    await expect(listed.locator(".agent-name")).to_have_text(["bad", "ok"])
    await expect(listed.first.locator(".agent-model")).to_have_text(ok["model"])
    first_ok = page.locator(f'.agent-list .agent[data-agent-id="{ok["id"]}"]')
    await first_ok.locator(".agent-head").click()
    await expect(first_ok.locator('.block[data-label="persona"] .block-value')).to_have_text("I am ok.")
    await expect(first_ok.locator('.tools li[data-tool="send_message"]')).to_be_visible()
    await expect(first_ok.locator(".system-prompt")).not_to_be_empty()
    await _screenshot(page, "dashboard-agents.png")
    await page.locator('.nav a[data-view="list"]').click()
    await expect(_run_row(page, done["id"])).to_be_visible()
    watched.assert_clean(base_url)


async def test_the_cancel_button_asks_then_cancels_a_running_run(
    browser: Browser, base_url: str, runs: Runs, admin: EmulatorAdmin
) -> None:
    agents = [await runs.agent(name) for name in ("ada", "grace")]
    await admin.configure(polls_to_end=100_000)  # the batch stays in progress until cancelled
    run = await runs.start([{"agent_id": a["id"], "input": "hi"} for a in agents], metadata={"name": "slow"})
    watched = await _open(browser)
    page = watched.page
    asked: list[str] = []
    await page.goto(f"{base_url}/#/runs/{run['id']}")
    await expect(page.locator(".run-head .badge")).to_have_text(re.compile("created|running"))
    button = page.locator(".cancel-run")
    await expect(button).to_have_text("Cancel run")

    # Saying no to the confirmation leaves the run alone.
    async def refuse(dialog: Dialog) -> None:
        asked.append(dialog.message)
        await dialog.dismiss()

    page.once("dialog", refuse)
    await button.click()
    await expect(page.locator(".run-head .badge")).to_have_text(re.compile("created|running"))
    assert len(asked) == 1 and f'"slow" ({run["id"]})' in asked[0], asked
    assert (await runs.client.get(f"/v1/messages/batches/{run['id']}")).json()["status"] in ("created", "running")

    async def accept(dialog: Dialog) -> None:
        asked.append(dialog.message)
        await dialog.accept()

    page.once("dialog", accept)
    await button.click()
    await expect(page.locator(".run-head .badge")).to_have_text("cancelled")
    await expect(page.locator(".cancel-run")).to_have_count(0)
    assert len(asked) == 2
    final = (await runs.client.get(f"/v1/messages/batches/{run['id']}")).json()
    assert final["status"] == "cancelled"
    patches = [r for r in watched.requests if r.method == "PATCH"]
    assert [httpx.URL(r.url).path for r in patches] == [f"/v1/messages/batches/{run['id']}/cancel"]
    await expect(page.locator(".agent .badge")).to_have_text(["cancelled", "cancelled"])
    await expect(page.locator("#live")).to_contain_text("all runs final")
    watched.assert_clean(base_url)


async def test_a_run_says_what_happened_after_failures_and_deleted_agents(
    browser: Browser, base_url: str, runs: Runs, admin: EmulatorAdmin, db_url: str
) -> None:
    """A completed run with a failed agent says so, in the list and on its page, and the Failed
    filter finds it; "done" counts only the agents that finished; a run's record stays when its
    agents are deleted (marked deleted); a provider batch never submitted has no "applied" badge,
    and no duration runs on past the end of its run; a finished run shows its last step."""
    ok, bad, gone = await runs.agent("ok"), await runs.agent("bad"), await runs.agent("gone")
    await admin.configure(errors={bad["id"]: "invalid_request_error"})
    clean = await runs.wait((await runs.start([{"agent_id": ok["id"], "input": "hi"}]))["id"])
    mixed = await runs.wait(
        (await runs.start([{"agent_id": a["id"], "input": "hi"} for a in (ok, bad, gone)], metadata={"name": "mixed"}))[
            "id"
        ]
    )
    assert (clean["status"], mixed["status"]) == ("completed", "completed")
    assert mixed["progress"]["agents"] == {"running": 0, "finished": 2, "failed": 1, "cancelled": 0}
    # An agent whose only request cannot be built: its run's one batch never reaches the provider.
    echo = await create_tool(runs.client, ECHO)
    unsendable = await runs.agent("unsendable", tool_ids=[echo["id"]])
    # Stored before the API checked schemas (or changed in the database): it cannot be offered.
    async with opened(db_url) as engine, engine.begin() as conn:
        unusable = {"parameters": "x", "name": 5}
        await conn.execute(update(tools).where(tools.c.id == echo["id"]).values(json_schema=unusable))
    unsent = await runs.wait((await runs.start([{"agent_id": unsendable["id"], "input": "hi"}]))["id"])
    assert unsent["status"] == "failed"
    (never,) = unsent["progress"]["provider_batches"]
    assert never["provider_batch_id"] is None and never["status"] == "applied" and never["ended_at"] is None

    # A run whose one agent is deleted before its first step (in the transaction that queues it,
    # so that no poller sees it first): it fails, and says why.
    orphan = await runs.agent("orphan")
    async with opened(db_url) as engine, engine.begin() as conn:
        now = datetime.now(UTC)
        request = BatchRunRequest(agent_id=orphan["id"], messages=(UserInput(text="hi"),))
        queued = await queue_batch_run(conn, DEFAULT_ORG_ID, [request], now=now, callback_url=None, default_max_steps=3)
        await delete_agent(conn, DEFAULT_ORG_ID, orphan["id"], now=now)
    emptied = await runs.wait(queued.id)
    assert (emptied["status"], emptied["error"]) == ("failed", EVERY_AGENT_DELETED)

    for agent in (bad, gone):
        assert (await runs.client.delete(f"/v1/agents/{agent['id']}")).status_code == 200
    after = (await runs.client.get(f"/v1/messages/batches/{mixed['id']}")).json()
    assert after["progress"]["agents"] == mixed["progress"]["agents"]

    watched = await _open(browser)
    page = watched.page
    await page.goto(base_url)
    row = _run_row(page, mixed["id"])
    await expect(row.locator(".badge")).to_have_text("completed, 1 of 3 failed")
    await expect(row.locator(".badge")).to_have_class(re.compile("badge-partly"))
    await expect(row.locator(".progress-count")).to_have_text("2 / 3")  # finished of all
    await expect(row.locator(".progress-percent")).to_have_text("66%")
    await expect(row.locator(".cost")).to_have_text(money(mixed["progress"]["cost_usd"]))
    await expect(_run_row(page, clean["id"]).locator(".badge")).to_have_text("completed")
    await expect(_run_row(page, unsent["id"]).locator(".badge")).to_have_text("failed")
    await expect(_run_row(page, emptied["id"]).locator(".badge")).to_have_attribute("title", EVERY_AGENT_DELETED)

    # The Failed filter: the failed runs and the completed one with a failed agent, not the clean one.
    await page.locator(".chip", has_text="Failed").click()
    await expect(page.locator("tr.run-row")).to_have_count(3)
    await expect(_run_row(page, mixed["id"])).to_be_visible()
    await expect(_run_row(page, unsent["id"])).to_be_visible()
    listed = [r for r in watched.api_calls("/v1/messages/batches") if "has_failures=true" in r.url]
    assert listed, [r.url for r in watched.api_calls("/v1/messages/batches")]

    # The run's page: its record as it was, its deleted agents marked, by the names they had.
    await _run_row(page, mixed["id"]).locator("a.run-id").click()
    await expect(page.locator(".run-head .badge")).to_have_text("completed, 1 of 3 failed")
    await expect(page.locator(".cards .card-value").first).to_have_text("66%")
    await expect(page.locator(".cards .card-label").nth(1)).to_have_text("Last step")
    await expect(page.locator(".cards")).to_contain_text(money(mixed["progress"]["cost_usd"]))
    failed = page.locator(".section", has_text="Failed agents").locator("tbody tr")
    await expect(failed.locator(".agent-name")).to_have_text("bad")
    await expect(failed.locator(".agent-deleted")).to_have_text("deleted")
    await expect(page.locator(".agent .agent-name")).to_have_count(3)
    deleted = page.locator('.agent[data-deleted="true"]')
    # The run's agents are listed by id.
    await expect(deleted.locator(".agent-name")).to_have_text([a["name"] for a in sorted((bad, gone), key=_by_id)])
    gone_row = page.locator(f'.agent[data-agent-id="{gone["id"]}"]')
    await expect(gone_row.locator(".badge")).to_have_text("finished")
    await gone_row.locator(".agent-head").click()
    await expect(gone_row.locator(".agent-deleted-note")).to_contain_text("This agent was deleted")
    await expect(gone_row.locator(".spend .spend-item").first).to_have_text("Steps answered1")
    await expect(page.locator(f'.agent[data-agent-id="{ok["id"]}"]')).not_to_contain_text("deleted")
    await _screenshot(page, "dashboard-deleted-agents.png")

    # A batch never submitted: no "applied" badge, and its duration ended with its run.
    await page.goto(f"{base_url}/#/runs/{unsent['id']}")
    batch = page.locator(".batch-row")
    await expect(batch.locator(".badge")).to_have_text("not submitted")
    await expect(batch).to_contain_text("never submitted")
    await expect(batch).not_to_contain_text("so far")
    await expect(page.locator(".charts")).not_to_contain_text("so far")
    await expect(page.locator(".cards .card-label").nth(1)).to_have_text("Last step")
    await expect(page.locator(".run-error")).to_have_count(0)  # its agent failed at its step, not the run
    took = float((await batch.locator("td.num").nth(1).inner_text()).removesuffix(" s"))
    run_took = datetime.fromisoformat(unsent["completed_at"]) - datetime.fromisoformat(unsent["created_at"])
    assert took <= round(run_took.total_seconds(), 1) + 0.1, took

    # The run that failed before its first step says why, above its (empty) record.
    await page.goto(f"{base_url}/#/runs/{emptied['id']}")
    await expect(page.locator(".run-head .badge")).to_have_text("failed")
    await expect(page.locator(".run-error")).to_have_text(f"The run failed: {EVERY_AGENT_DELETED}")
    watched.assert_clean(base_url)


ECHO = '''
def echo(word: str) -> str:
    """Say a word back.

    Args:
        word: The word.
    """
    return word
'''


def _by_id(agent: dict[str, Any]) -> str:
    return str(agent["id"])


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


async def test_sleeptime_runs_are_tagged_filtered_and_costed_apart(browser: Browser, base_url: str, runs: Runs) -> None:
    main = await runs.agent("pal", enable_sleeptime=True)
    turn = await runs.start([{"agent_id": main["id"], "input": "I like plums."}])
    assert (await runs.wait(turn["id"]))["status"] == "completed"
    (queued,) = (await runs.client.post("/v1/sleeptime/run", json={"all": True})).json()
    done = await runs.wait(queued["id"])
    assert done["status"] == "completed" and done["kind"] == "sleeptime", done
    costs = (await runs.client.get("/v1/messages/batches/costs")).json()
    (sleeptime,) = [k for k in costs["kinds"] if k["kind"] == "sleeptime"]

    watched = await _open(browser)
    page = watched.page
    await page.goto(f"{base_url}/")
    await expect(_run_row(page, done["id"]).locator(".kind-tag")).to_have_text("sleep-time")
    await expect(_run_row(page, turn["id"]).locator(".kind-tag")).to_have_count(0)
    card = page.locator(".sleeptime-cost")
    await expect(card).to_contain_text(money(sleeptime["cost_usd"]))
    await expect(card).to_contain_text(f"(normal API: {money(sleeptime['cost_without_batch_usd'])})")

    await page.get_by_role("button", name="Sleep-time").click()
    await expect(page.locator("tr.run-row")).to_have_count(1)
    await expect(_run_row(page, done["id"])).to_be_visible()
    assert any("kind=sleeptime" in (r.url or "") for r in watched.api_calls("/v1/messages/batches"))
    watched.assert_clean(base_url)
