"""``make rounds``: provider rounds per task, with and without several tool calls per turn.

In batch mode a round (one provider batch) takes minutes to hours, so what a user waits for is the
number of rounds a task needs. This runs a small task set as batch runs through the provider
emulator (in a separate process; its scripted model calls several tools in one turn when the
request allows it), once with ``parallel_tool_calls`` on and once off, and prints the rounds each
task took: the provider requests the emulator answered for the task's agent.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from benchmarks.bench import emulator_process
from nightshift.batch.steps import queue_batch_run
from nightshift.batch.worker import worker_of
from nightshift.config import Settings
from nightshift.domain.agents import LLMConfig
from nightshift.domain.batches import BatchRunRequest, BatchRunStatus
from nightshift.domain.messages import Role, UserInput, said_text
from nightshift.domain.orgs import DEFAULT_ORG_ID
from nightshift.domain.tool_rules import ChildToolRule, InitToolRule, TerminalToolRule, ToolRule
from nightshift.emulator import EmulatorAdmin
from nightshift.emulator.environment import sdk_environment
from nightshift.parts import running_parts
from nightshift.providers.registry import provider_info
from nightshift.services.agents import AgentSpec, NewBlock, create_agents
from nightshift.services.tools import create_tool
from nightshift.store import agents as agent_store
from nightshift.store import batch_runs as batch_run_store
from nightshift.store import messages as message_store
from nightshift.store.db import create_engine, upgrade
from nightshift.store.orgs import ensure_default_org

console = Console(width=160)

WEATHER_TOOL = '''
def get_weather(city: str) -> str:
    """Today's weather in a city.

    Args:
        city: The city's name.
    """
    return f"{city}: {len(city) * 3 % 25 + 5} C, {['sunny', 'cloudy', 'rainy'][len(city) % 3]}"
'''
FETCH_TOOL = '''
def fetch_report(company: str) -> str:
    """Fetch a company's latest quarterly report.

    Args:
        company: The company's name.
    """
    return f"{company} Q3: revenue 12.4M (+8%), costs 9.1M (+3%)"
'''
SUMMARIZE_TOOL = '''
def summarize_report(company: str) -> str:
    """Summarise the report fetched for a company in one line.

    Args:
        company: The company's name.
    """
    return f"{company} grew revenue faster than costs in Q3"
'''


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """One task: what the user asks, the custom tools (source) and the tool rules its agent has."""

    name: str
    ask: str
    tools: tuple[str, ...] = ()
    rules: tuple[ToolRule, ...] = ()


TASKS = (
    Task(
        name="look up the weather in three cities and tell me",
        ask="Look up the weather in Paris, Rome and New York with get_weather and tell me.",
        tools=(WEATHER_TOOL,),
    ),
    Task(
        name="save three facts to memory, then answer",
        ask="Please remember: my name is Ada; I live in Lyon; I like green tea.",
    ),
    Task(
        name="three-tool chain with rules (fetch -> summarize -> send_message)",
        ask="Please use fetch_report for ACME and summarize it for me.",
        tools=(FETCH_TOOL, SUMMARIZE_TOOL),
        rules=(
            InitToolRule(tool_name="fetch_report"),
            ChildToolRule(tool_name="fetch_report", children=("summarize_report",)),
            ChildToolRule(tool_name="summarize_report", children=("send_message",)),
            TerminalToolRule(tool_name="send_message"),
        ),
    ),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What a task came to: the rounds it took and what the agent said last."""

    rounds: int
    answer: str


async def run_tasks(database_url: str, provider: str, emulator_url: str, *, parallel: bool) -> list[Outcome]:
    """Run every task as one agent of one batch run, until the run ends; per task, in ``TASKS`` order."""
    settings = Settings(database_url=database_url, poll_interval_seconds=0.0, poller=False, tool_workers=2)
    engine = create_engine(settings.resolved_database_url)
    await upgrade(engine)
    config = LLMConfig(provider=provider, model=provider_info(provider).example_model, parallel_tool_calls=parallel)
    async with engine.begin() as conn:
        await ensure_default_org(conn, datetime.now(UTC))
        specs = []
        for index, task in enumerate(TASKS):
            tool_ids = [
                (await create_tool(conn, DEFAULT_ORG_ID, now=datetime.now(UTC), source_code=source)).id
                for source in task.tools
            ]
            specs.append(
                AgentSpec(
                    name=f"task-{index}",
                    llm_config=config,
                    memory_blocks=[NewBlock(label="human", value="Nothing known yet.", limit=2000)],
                    tool_ids=tool_ids,
                    tool_rules=task.rules,
                )
            )
        agent_ids = [a.id for a in await create_agents(conn, DEFAULT_ORG_ID, specs, now=datetime.now(UTC))]
    requests = [
        BatchRunRequest(agent_id=agent_id, messages=(UserInput(text=task.ask),))
        for agent_id, task in zip(agent_ids, TASKS, strict=True)
    ]
    async with running_parts(settings, engine) as parts:
        worker = worker_of(parts)
        async with engine.begin() as conn:
            run = await queue_batch_run(
                conn, DEFAULT_ORG_ID, requests, now=datetime.now(UTC), callback_url=None, default_max_steps=10
            )
        await worker.start_queued_runs()
        for _ in range(50):
            async with engine.connect() as conn:
                current = await batch_run_store.get_run(conn, DEFAULT_ORG_ID, run.id)
            if current is not None and current.status in (BatchRunStatus.COMPLETED, BatchRunStatus.FAILED):
                break
            await worker.run_once(limit=100)
        else:
            raise RuntimeError("the task run did not end")
    admin = EmulatorAdmin(emulator_url)
    outcomes = []
    try:
        async with engine.connect() as conn:
            agents = await agent_store.load_agents(conn, DEFAULT_ORG_ID, agent_ids)
            for agent_id in agent_ids:
                window = await message_store.get_messages(conn, agents[agent_id].message_ids)
                said = [said_text(m) for i in agents[agent_id].message_ids if (m := window[i]).role is Role.ASSISTANT]
                calls = await admin.model_calls(custom_id=agent_id)
                outcomes.append(Outcome(rounds=len(calls), answer=said[-1] if said else ""))
    finally:
        await admin.aclose()
        await engine.dispose()
    return outcomes


def main(
    provider: Annotated[str, typer.Option(help="Provider the agents use (anthropic, openai, google_ai)")] = "anthropic",
) -> None:
    """Run the task set with and without parallel tool calls and print the rounds per task."""
    provider_info(provider)  # an unknown name stops here, naming the known ones
    table = Table(title=f"provider rounds per task ({provider}, through the emulator)")
    for column in ("task", "rounds, parallel tool calls", "rounds, one call per turn", "answer (parallel)"):
        table.add_column(column, justify="right" if column.startswith("rounds") else "left")
    with emulator_process() as (url, _pid):
        os.environ.update(sdk_environment(url, api_key="rounds"))
        results = {}
        for parallel in (True, False):
            with tempfile.TemporaryDirectory() as tmp:
                database_url = f"sqlite:///{Path(tmp) / 'rounds.db'}"
                results[parallel] = asyncio.run(run_tasks(database_url, provider, url, parallel=parallel))
    for task, with_parallel, without in zip(TASKS, results[True], results[False], strict=True):
        table.add_row(task.name, str(with_parallel.rounds), str(without.rounds), with_parallel.answer)
    console.print(table)


if __name__ == "__main__":
    typer.run(main)
