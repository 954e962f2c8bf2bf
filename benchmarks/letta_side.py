"""``make letta-side``: what Letta 0.7.14 spends starting a batch run of AGENTS agents, and resuming it.

Letta is the server nightshift's API follows; run on the same machine in the same hour as ``make
submit``, this gives nightshift's figures a neighbour measured on the same work. Letta runs from
an environment of its own (``.venv-letta``, which the Makefile target makes: its pins clash with
nightshift's), so this script imports nothing from nightshift.

ROUNDS child processes run one after the other, each with a fresh SQLite database (its own HOME in
a temporary directory: Letta keeps its database in ``~/.letta``). Each builds Letta's
``SyncServer`` in-process (no HTTP server) and creates AGENTS agents as Letta's defaults make them
(anthropic/claude-3-5-sonnet-20241022, the letta/letta-free embedding, the "basic" human and
"sam_pov" persona blocks, the base tools and tool rules). Then STEPS times on the same agents (the
first is the process's first; the later ones carry the earlier steps' messages):

* submit: Letta's batch route function, called directly with one user message per agent, timed
  from the JSON body (validated as FastAPI would) until the Anthropic SDK's batch create is
  entered; also until it returned (the SDK's transform and encoding of the requests) and until the
  route returned (Letta's batch job and item rows).
* resume (unless ``--no-resume``): Letta's own poller finds the batch ended and downloads its
  results, in which every agent calls core_memory_append with request_heartbeat true; Letta runs
  the tools, stores the messages and, for the heartbeat, submits the next batch. Timed from
  ``resume_step_after_request``'s start, and from the poll's start, until that create is entered.

Only the network is fake: httpx's transports answer api.anthropic.com in-process with well-formed
Message Batches responses, so Letta's work and the SDK's own still run. Any other host but the
loopback is an error, so that an unexpected call shows. The other patches only read the clock:
around the SDK's create and Letta's resume, and with ``--phases`` around Letta's steps.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table
from starlette.requests import Request

console = Console(width=200)

MODEL = "claude-3-5-sonnet-20241022"
MODEL_HANDLE = f"anthropic/{MODEL}"
EMBEDDING_HANDLE = "letta/letta-free"
USER_TEXT = "What do you remember about me?"
# What every agent's fake answer appends to its human block: counted afterwards, to show the tools ran.
APPENDED = "User asked what I remember about them."
ANTHROPIC_HOST = "api.anthropic.com"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
# Where a child leaves its figures, in its HOME, for the parent to read.
RESULT_FILE = "result.json"
SDK_CREATE = "sdk batches.create (transform + encode + fake http)"
# Letta's modules this script uses, imported before anything is timed (see load_letta).
LETTA_MODULES = (
    "letta.agents.letta_agent_batch",
    "letta.jobs.llm_batch_job_polling",
    "letta.llm_api.anthropic_client",
    "letta.orm.block",
    "letta.schemas.agent",
    "letta.schemas.block",
    "letta.schemas.enums",
    "letta.schemas.letta_request",
    "letta.server.db",
    "letta.server.rest_api.routers.v1.messages",
    "letta.server.server",
    "letta.services.agent_manager",
    "letta.services.job_manager",
    "letta.services.llm_batch_manager",
    "letta.services.message_manager",
)

# Letta's steps timed with --phases, by module and class (None: functions of the module itself, such
# as _prepare_in_context_messages, which LettaAgentBatch looks up there), in the order they run.
PHASES: dict[tuple[str, str | None], tuple[str, ...]] = {
    ("letta.services.job_manager", "JobManager"): ("create_job",),
    ("letta.services.agent_manager", "AgentManager"): ("get_agent_by_id",),
    ("letta.agents.letta_agent_batch", None): ("_prepare_in_context_messages",),
    ("letta.services.message_manager", "MessageManager"): ("get_messages_by_ids", "create_many_messages"),
    ("letta.agents.letta_agent_batch", "LettaAgentBatch"): (
        "_rebuild_memory",
        "_prepare_tools_per_agent",
        "resume_step_after_request",
        "_collect_resume_context",
        "_update_request_statuses",
        "_execute_tools",
        "_persist_tool_messages",
        "_mark_steps_complete",
        "_prepare_next_iteration",
        "step_until_request",
    ),
    ("letta.llm_api.anthropic_client", "AnthropicClient"): ("build_request_data", "send_llm_batch_request_async"),
    ("letta.services.llm_batch_manager", "LLMBatchManager"): (
        "create_llm_batch_job",
        "create_llm_batch_items_bulk",
        "list_running_llm_batches",
        "bulk_update_batch_llm_items_results_by_agent",
    ),
}


# The parent: fresh child processes one after the other, then the table.


def run_rounds(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each round in a child process of its own with a fresh database; their figures."""
    results = []
    for index in range(1, args.rounds + 1):
        with tempfile.TemporaryDirectory(prefix="letta-side-") as home:
            console.print(f"=== round {index}/{args.rounds}: a fresh database in {home}")
            started = time.perf_counter()
            done = subprocess.run(child_command(args, home), env=child_env(home), check=False)
            if done.returncode != 0:
                sys.exit(f"round {index}: the child process failed (exit status {done.returncode})")
            result: dict[str, Any] = json.loads((Path(home) / RESULT_FILE).read_text())
        result["round"] = index
        result["child_wall_s"] = round(time.perf_counter() - started, 1)
        result["loadavg_at_end"] = [round(load, 2) for load in os.getloadavg()]
        results.append(result)
    return results


def child_command(args: argparse.Namespace, home: str) -> list[str]:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", home]
    command += ["--agents", str(args.agents), "--steps", str(args.steps)]
    if args.no_resume:
        command.append("--no-resume")
    if args.phases:
        command.append("--phases")
    return command


def child_env(home: str) -> dict[str, str]:
    """The child's environment. Letta reads its settings when imported, so they are set here."""
    env = dict(os.environ)
    # Keys that would send Letta to PostgreSQL, or to other providers and tool services.
    for name in ("LETTA_PG_URI", "LETTA_PG_USER", "OPENAI_API_KEY", "COMPOSIO_API_KEY", "E2B_API_KEY"):
        env.pop(name, None)
    env["HOME"] = home
    env["ANTHROPIC_API_KEY"] = "sk-ant-fake-key-for-benchmark"
    env["LETTA_ENABLE_BATCH_JOB_POLLING"] = "true"  # the batch route refuses without it
    return env


def summary(results: list[dict[str, Any]]) -> Table:
    agents = results[0]["agents"]
    table = Table(title=f"Letta {results[0]['letta_version']}: a batch run of {agents:,} agents, ms per agent")
    columns = (
        "round",
        "step",
        "create agents",
        "submit -> create called",
        "submit -> create returned",
        "submit -> route returned",
        "resume -> next create called",
        "poll -> next create called",
    )
    for column in columns:
        table.add_column(column, justify="right")
    for result in results:
        for step in result["steps"]:
            figures = (
                result["create_agents_ms_per_agent"],
                step["submit_to_create_called_ms_per_agent"],
                step["submit_to_create_returned_ms_per_agent"],
                step["submit_to_route_returned_ms_per_agent"],
                step.get("resume_to_next_create_called_ms_per_agent"),
                step.get("poll_to_next_create_called_ms_per_agent"),
            )
            shown = ("-" if figure is None else f"{figure:.2f}" for figure in figures)
            table.add_row(str(result["round"]), str(step["step"]), *shown)
    return table


# The child: one fresh database, AGENTS agents, STEPS submits (and resumes).


@dataclass
class Timings:
    """What the patched functions record during one submit or one resume."""

    marks: dict[str, list[float]] = field(default_factory=dict)  # name -> perf_counter() at each pass
    phases: dict[str, tuple[float, int]] = field(default_factory=dict)  # label -> (seconds, calls)
    batch_sizes: list[int] = field(default_factory=list)  # requests in each batch created

    def mark(self, name: str) -> None:
        self.marks.setdefault(name, []).append(time.perf_counter())

    def first(self, name: str) -> float:
        return self.marks[name][0]

    def add(self, phase: str, seconds: float) -> None:
        total, calls = self.phases.get(phase, (0.0, 0))
        self.phases[phase] = (total + seconds, calls + 1)

    def clear(self) -> None:
        self.marks.clear()
        self.phases.clear()

    def phase_figures(self) -> dict[str, tuple[float, int]]:
        return {label: (round(seconds, 3), calls) for label, (seconds, calls) in self.phases.items()}

    def log_phases(self) -> None:
        for label, (seconds, calls) in self.phases.items():
            console.print(f"      {seconds:8.3f} s {calls:6d} calls  {label}", highlight=False)


@dataclass
class FakeAnthropic:
    """Answers api.anthropic.com in-process as the Message Batches API would."""

    batches: dict[str, list[str]] = field(default_factory=dict)  # batch id -> its custom ids (agent ids)
    ended: bool = False  # what a retrieve says: in progress until the resume sets it

    def answer(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path.rstrip("/")
        batches = "/v1/messages/batches"
        if request.method == "POST" and path == batches:
            # Letta does not read the counts here: the body the SDK encoded is left unparsed.
            return httpx.Response(200, json=batch_json(f"msgbatch_{uuid.uuid4().hex[:24]}", ended=False, count=0))
        if request.method == "GET" and path.startswith(f"{batches}/") and path.endswith("/results"):
            lines = (json.dumps(result_line(custom_id)) for custom_id in self.batches.get(path.split("/")[4], []))
            body = "".join(f"{line}\n" for line in lines).encode()
            return httpx.Response(200, content=body, headers={"content-type": "application/binary"})
        if request.method == "GET" and path.startswith(f"{batches}/"):
            batch_id = path.split("/")[4]
            return httpx.Response(
                200, json=batch_json(batch_id, ended=self.ended, count=len(self.batches.get(batch_id, [])))
            )
        if request.method == "GET" and path.startswith("/v1/models"):
            # Read once, when Letta resolves the model handle.
            model = {"type": "model", "id": MODEL, "display_name": "Claude 3.5 Sonnet (New)"}
            page = {"data": [{**model, "created_at": "2024-10-22T00:00:00Z"}], "has_more": False}
            return httpx.Response(200, json={**page, "first_id": MODEL, "last_id": MODEL})
        return httpx.Response(404, json={"type": "error", "error": {"type": "not_found_error", "message": path}})


def iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def batch_json(batch_id: str, *, ended: bool, count: int) -> dict[str, Any]:
    now = time.time()
    counts = {"processing": 0 if ended else count, "succeeded": count if ended else 0}
    return {
        "id": batch_id,
        "type": "message_batch",
        "processing_status": "ended" if ended else "in_progress",
        "request_counts": {**counts, "errored": 0, "canceled": 0, "expired": 0},
        "created_at": iso(now),
        "expires_at": iso(now + 86400),
        "ended_at": iso(now) if ended else None,
        "archived_at": None,
        "cancel_initiated_at": None,
        "results_url": f"https://{ANTHROPIC_HOST}/v1/messages/batches/{batch_id}/results" if ended else None,
    }


def result_line(custom_id: str) -> dict[str, Any]:
    """One agent's answer: a core_memory_append call that asks for a heartbeat, so Letta steps again."""
    arguments = {
        "inner_thoughts": "The user asked what I remember; noting it.",
        "label": "human",
        "content": APPENDED,
        "request_heartbeat": True,
    }
    call = {
        "type": "tool_use",
        "id": f"toolu_{uuid.uuid4().hex[:24]}",
        "name": "core_memory_append",
        "input": arguments,
    }
    message = {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [call],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 2000, "output_tokens": 60},
    }
    return {"custom_id": custom_id, "result": {"type": "succeeded", "message": message}}


def for_anthropic(request: httpx.Request) -> bool:
    if request.url.host == ANTHROPIC_HOST:
        return True
    if request.url.host in LOOPBACK:
        return False
    raise RuntimeError(f"letta_side: unexpected network call to {request.url}")


def install_fake_network(fake: FakeAnthropic) -> None:
    """Replace only the sockets: the requests are built and encoded as they would be."""
    sync_send = httpx.HTTPTransport.handle_request
    async_send = httpx.AsyncHTTPTransport.handle_async_request

    def handle_request(self: httpx.HTTPTransport, request: httpx.Request) -> httpx.Response:
        if for_anthropic(request):
            request.read()
            return fake.answer(request)
        return sync_send(self, request)

    async def handle_async_request(self: httpx.AsyncHTTPTransport, request: httpx.Request) -> httpx.Response:
        if for_anthropic(request):
            await request.aread()
            return fake.answer(request)
        return await async_send(self, request)

    httpx.HTTPTransport.handle_request = handle_request  # type: ignore[method-assign]
    httpx.AsyncHTTPTransport.handle_async_request = handle_async_request  # type: ignore[method-assign]


def time_batch_create(timings: Timings, fake: FakeAnthropic) -> None:
    """Mark when the SDK's batch create is entered and when it returns, and tell the fake its requests."""
    from anthropic.resources.beta.messages.batches import AsyncBatches

    original = AsyncBatches.create

    async def create(self: AsyncBatches, *args: Any, **kwargs: Any) -> Any:
        timings.mark("create_called")
        started = time.perf_counter()
        batch = await original(self, *args, **kwargs)
        timings.add(SDK_CREATE, time.perf_counter() - started)
        timings.mark("create_returned")
        custom_ids = [request["custom_id"] for request in kwargs["requests"]]
        fake.batches[batch.id] = custom_ids
        timings.batch_sizes.append(len(custom_ids))
        return batch

    AsyncBatches.create = create  # type: ignore[method-assign]


def mark_resume(timings: Timings) -> None:
    from letta.agents.letta_agent_batch import LettaAgentBatch

    original = LettaAgentBatch.resume_step_after_request

    async def resume(self: Any, *args: Any, **kwargs: Any) -> Any:
        timings.mark("resume_entered")
        return await original(self, *args, **kwargs)

    LettaAgentBatch.resume_step_after_request = resume


def time_phases(timings: Timings) -> None:
    """Wrap Letta's steps in PHASES so each adds its time; they pass everything through."""
    for (module, owner_name), names in PHASES.items():
        owner = importlib.import_module(module)
        if owner_name is not None:
            owner = getattr(owner, owner_name)
        for name in names:
            label = f"{owner_name or module.rsplit('.', 1)[1]}.{name}"
            setattr(owner, name, timed(getattr(owner, name), label, timings))


def timed(function: Any, label: str, timings: Timings) -> Any:
    if inspect.iscoroutinefunction(function):

        async def awaited(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await function(*args, **kwargs)
            finally:
                timings.add(label, time.perf_counter() - started)

        return awaited

    def called(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            timings.add(label, time.perf_counter() - started)

    return called


def load_letta() -> None:
    """Import Letta's modules now: their first import is not timed, and their loggers exist to be
    turned down (Letta logs each agent's steps at INFO; at a thousand agents the printing would be
    timed too)."""
    for module in LETTA_MODULES:
        importlib.import_module(module)
    logging.getLogger().setLevel(logging.WARNING)
    for name in list(logging.root.manager.loggerDict):
        if name.lower().startswith("letta") or name.startswith("httpx"):
            logging.getLogger(name).setLevel(logging.WARNING)


def create_agents(server: Any, actor: Any, count: int) -> list[str]:
    """``count`` agents as Letta's defaults make them: base tools, base tool rules, a memgpt agent."""
    from letta.schemas.agent import CreateAgent
    from letta.schemas.block import CreateBlock
    from letta.utils import get_human_text, get_persona_text

    human, persona = get_human_text("basic"), get_persona_text("sam_pov")
    ids = []
    for index in range(count):
        blocks = [CreateBlock(label="human", value=human), CreateBlock(label="persona", value=persona)]
        spec = CreateAgent(
            name=f"bench-agent-{index}", model=MODEL_HANDLE, embedding=EMBEDDING_HANDLE, memory_blocks=blocks
        )
        state = server.create_agent(spec, actor=actor)
        ids.append(str(state.id))
    tools = sorted(tool.name for tool in state.tools)
    console.print(f"agents' tools: {tools}; model {state.llm_config.model} ({state.llm_config.model_endpoint_type})")
    return ids


def route_request(body: bytes) -> Request:
    """The starlette request the route reads its content length from."""
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    scope = {"type": "http", "method": "POST", "path": "/v1/messages/batches", "query_string": b"", "headers": headers}
    return Request(scope)


def per_agent(seconds: float, agents: int) -> float:
    return round(seconds / agents * 1000, 3)


async def submit(server: Any, agent_ids: list[str], timings: Timings, step: int) -> dict[str, Any]:
    """Letta's batch route with one user message per agent, until it returns."""
    from letta.schemas.letta_request import CreateBatch
    from letta.server.rest_api.routers.v1 import messages as messages_router

    timings.clear()
    requests = [{"agent_id": agent, "messages": [{"role": "user", "content": USER_TEXT}]} for agent in agent_ids]
    body = json.dumps({"requests": requests}).encode()
    request = route_request(body)
    agents = len(agent_ids)
    started = time.perf_counter()
    payload = CreateBatch.model_validate(json.loads(body))  # what FastAPI does with the body
    validated = time.perf_counter()
    job = await messages_router.create_messages_batch(request=request, payload=payload, server=server, actor_id=None)
    returned = time.perf_counter()
    called, created = timings.first("create_called") - started, timings.first("create_returned") - started
    console.print(
        f"step {step}: submit, job {job.id}: create called after {called:.2f} s ({per_agent(called, agents):.2f} "
        f"ms per agent), returned after {created:.2f} s; the route returned after {returned - started:.2f} s",
        highlight=False,
    )
    timings.log_phases()
    return {
        "submit_to_create_called_s": round(called, 3),
        "submit_to_create_returned_s": round(created, 3),
        "submit_to_route_returned_s": round(returned - started, 3),
        "submit_to_create_called_ms_per_agent": per_agent(called, agents),
        "submit_to_create_returned_ms_per_agent": per_agent(created, agents),
        "submit_to_route_returned_ms_per_agent": per_agent(returned - started, agents),
        "payload_validate_s": round(validated - started, 3),
        "requests_in_batch": timings.batch_sizes[-1],
        "submit_phases_s": timings.phase_figures(),
    }


async def resume(server: Any, agents: int, timings: Timings, fake: FakeAnthropic, step: int) -> dict[str, Any]:
    """Letta's poller over the ended batch, until the resume has entered the next batch's create."""
    from letta.jobs.llm_batch_job_polling import poll_running_llm_batches

    timings.clear()
    fake.ended = True
    started = time.perf_counter()
    answers = await poll_running_llm_batches(server)
    polled = time.perf_counter()
    fake.ended = False
    for answer in answers or ():
        if isinstance(answer, Exception):
            raise answer
    if "create_called" not in timings.marks:
        raise RuntimeError(f"the resume submitted no next batch: {answers!r}")
    entered, called = timings.first("resume_entered"), timings.first("create_called")
    console.print(
        f"step {step}: resume: poll start -> next create called {called - started:.2f} s; "
        f"resume_step_after_request -> next create called {called - entered:.2f} s "
        f"({per_agent(called - entered, agents):.2f} ms per agent); the poll returned after {polled - started:.2f} s; "
        f"the next batch has {timings.batch_sizes[-1]} requests",
        highlight=False,
    )
    timings.log_phases()
    return {
        "resume_to_next_create_called_s": round(called - entered, 3),
        "resume_to_next_create_called_ms_per_agent": per_agent(called - entered, agents),
        "poll_to_next_create_called_s": round(called - started, 3),
        "poll_to_next_create_called_ms_per_agent": per_agent(called - started, agents),
        "poll_total_s": round(polled - started, 3),
        "next_batch_requests": timings.batch_sizes[-1],
        "resume_phases_s": timings.phase_figures(),
    }


def appended_blocks(step: int) -> int:
    """Human blocks that hold the appended text once per step: the tool calls ran and were stored."""
    from letta.orm.block import Block
    from letta.server.db import db_registry

    pattern = "%" + f"{APPENDED}%" * step
    with db_registry.session() as session:
        return int(session.query(Block).filter(Block.label == "human", Block.value.like(pattern)).count())


def cancel_running_batches(server: Any, actor: Any) -> None:
    """The resume's heartbeat batch is running in Letta's database: cancelled, so that the next
    step's poll resumes only that step's own batch."""
    from letta.schemas.enums import JobStatus

    for batch in server.batch_manager.list_running_llm_batches():
        server.batch_manager.update_llm_batch_status(llm_batch_id=batch.id, status=JobStatus.cancelled, actor=actor)


async def run_steps(
    server: Any, actor: Any, agent_ids: list[str], fake: FakeAnthropic, args: argparse.Namespace
) -> list[dict[str, Any]]:
    timings = Timings()
    time_batch_create(timings, fake)
    if args.phases:
        time_phases(timings)
    mark_resume(timings)
    steps = []
    for step in range(1, args.steps + 1):
        figures: dict[str, Any] = {"step": step, "loadavg_at_start": [round(load, 2) for load in os.getloadavg()]}
        figures |= await submit(server, agent_ids, timings, step)
        if not args.no_resume:
            figures |= await resume(server, len(agent_ids), timings, fake, step)
            # Not timed: a check that the tools ran, and the heartbeat batch out of the next poll's way.
            figures["human_blocks_with_appended_text"] = appended = appended_blocks(step)
            console.print(
                f"      check: {appended}/{len(agent_ids)} human blocks hold the appended text {step} time(s)"
            )
            cancel_running_batches(server, actor)
        steps.append(figures)
    return steps


def child(args: argparse.Namespace) -> None:
    """One round: a server on the fresh database in HOME, its agents, its steps; the figures in HOME."""
    # Patched before Letta builds any client, so that no request can leave the machine.
    fake = FakeAnthropic()
    install_fake_network(fake)
    load_letta()
    import letta
    from letta.server.server import SyncServer

    started = time.perf_counter()
    server = SyncServer()
    actor = server.user_manager.get_user_or_default(user_id=None)
    console.print(f"letta {letta.__version__}: SyncServer built in {time.perf_counter() - started:.2f} s")
    started = time.perf_counter()
    agent_ids = create_agents(server, actor, args.agents)
    created = time.perf_counter() - started
    console.print(
        f"created {args.agents} agents in {created:.1f} s ({per_agent(created, args.agents):.2f} ms per agent)"
    )
    result = {
        "letta_version": letta.__version__,
        "agents": args.agents,
        "create_agents_s": round(created, 2),
        "create_agents_ms_per_agent": per_agent(created, args.agents),
        "steps": asyncio.run(run_steps(server, actor, agent_ids, fake, args)),
    }
    (Path(args.child) / RESULT_FILE).write_text(json.dumps(result))


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--agents", type=int, default=1_000, help="agents in each round (default: 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes and databases, one after the other")
    parser.add_argument("--steps", type=int, default=2, help="submits (and resumes) per round on the same agents")
    parser.add_argument("--no-resume", action="store_true", help="time the submits only")
    parser.add_argument("--phases", action="store_true", help="time Letta's steps too, and print them")
    parser.add_argument("--output", type=Path, help="write the raw figures as JSON to this file (default: none)")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # the HOME of a round's child process
    args = parser.parse_args()
    if args.agents < 1 or args.rounds < 1 or args.steps < 1:
        parser.error("--agents, --rounds and --steps must be at least 1")
    return args


def main() -> None:
    args = arguments()
    if args.child:
        child(args)
        return
    results = run_rounds(args)
    if args.output:
        args.output.write_text(json.dumps(results, indent=1))
        console.print(f"raw figures: {args.output}")
    console.print(summary(results))
    console.print(
        "the clock starts before the body is validated as CreateBatch; 'create' is the Anthropic SDK's "
        "batches.create (network replaced in-process); create agents is per agent, once per round"
    )


if __name__ == "__main__":
    main()
