"""Real ``nightshift serve`` processes for end-to-end tests (start, wait until healthy, SIGKILL,
stop), and checks that what they stored holds every message exactly once.

Each server writes its output to a log file (a pipe nobody reads would fill up and block it); the
tails of the logs are printed when a test's servers are stopped, so a failing test shows them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from nightshift.emulator import EmulatorAdmin
from nightshift.serving import free_port
from support import warm_start
from support.runs import Runs

START_TIMEOUT = 30.0
POLL_INTERVAL = 0.05
STOP_TIMEOUT = 15.0


@dataclass(slots=True)
class Server:
    """One ``python -m nightshift serve`` process."""

    name: str
    process: subprocess.Popen[bytes] | warm_start.ForkedProcess
    base_url: str
    log_path: Path

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's output, for failure messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return f"--- {self.name} ({self.log_path}) ---\n{text[-chars:]}"

    def pids(self) -> set[int]:
        """The server's process id and its children's: its poller runs in a child of its own
        (``NIGHTSHIFT_POLLER_PROCESS``, the default), which holds the leases of the batches it works on."""
        found = {self.process.pid}
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{self.process.pid}/task"):
                with open(f"/proc/{self.process.pid}/task/{task}/children") as children:
                    found.update(int(pid) for pid in children.read().split())
        return found

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to clean up, as in a machine crash."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=STOP_TIMEOUT)
        assert self.process.returncode == -signal.SIGKILL, f"{self.name} exited with {self.process.returncode}"

    def stop(self) -> None:
        """Stop gracefully (SIGINT, as Ctrl-C), or SIGKILL when that takes too long."""
        self.interrupt()
        self.wait_stopped()

    def interrupt(self) -> None:
        """Ask the server to stop (SIGINT, as Ctrl-C); ``wait_stopped`` waits for it."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)

    def wait_stopped(self) -> None:
        """Wait for an interrupted server to exit, or SIGKILL it when that takes too long."""
        try:
            self.process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT)


def server_environment(db_url: str, home: Path, **extra: str) -> dict[str, str]:
    """The environment of a server under test: ours (with the SDK variables) plus the database and a fast poller.

    The shell's own ``NIGHTSHIFT_*`` settings (a password, a port...) are left out.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("NIGHTSHIFT_")}
    env.update(
        {
            "NIGHTSHIFT_HOME": str(home),
            "NIGHTSHIFT_DATABASE_URL": db_url,
            "NIGHTSHIFT_POLL_INTERVAL_SECONDS": str(POLL_INTERVAL),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def spawn(name: str, env: dict[str, str], log_dir: Path, *, forked: bool = True) -> Server:
    """Start ``nightshift serve`` on a free port (not yet waiting for it to be ready): forked from a
    process that has imported it (``support.warm_start``) where its environment allows, unless
    not ``forked`` (for a test of the process itself: its command line is ``python -m nightshift serve``)."""
    port = free_port()
    log_path = log_dir / f"{name}.log"
    arguments = ["serve", "--port", str(port)]
    process: subprocess.Popen[bytes] | warm_start.ForkedProcess
    if forked and warm_start.forkable(env):
        process = warm_start.start(arguments, env, log_path)
    else:
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "nightshift", *arguments],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
    return Server(name=name, process=process, base_url=f"http://127.0.0.1:{port}", log_path=log_path)


async def wait_healthy(server: Server) -> None:
    """Wait until the server answers ``/v1/health`` (it has migrated the database and started its poller)."""
    deadline = time.monotonic() + START_TIMEOUT
    async with httpx.AsyncClient(timeout=5) as http:
        while time.monotonic() < deadline:
            assert server.process.poll() is None, f"{server.name} exited early\n{server.log_tail()}"
            try:
                if (await http.get(f"{server.base_url}/v1/health")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError(f"{server.name} did not become healthy within {START_TIMEOUT} s\n{server.log_tail()}")


class Servers:
    """The servers a test starts; ``stop_all`` (or ``kill_all``) ends those still running and prints their logs.

    The logs are printed so that pytest shows them with a failing test (it hides them otherwise).
    """

    def __init__(self, env: dict[str, str], log_dir: Path, *, forked: bool = True) -> None:
        self.env = env
        self.log_dir = log_dir
        self.forked = forked
        self.started: list[Server] = []

    async def start(self, name: str, **extra_env: str) -> Server:
        """Start a server and wait until it is healthy."""
        server = spawn(name, {**self.env, **extra_env}, self.log_dir, forked=self.forked)
        self.started.append(server)  # stopped by stop_all or kill_all even if it never becomes healthy
        await wait_healthy(server)
        return server

    def stop_all(self) -> None:
        """Stop every server at once (each drains in parallel with the others), then print the logs."""
        for server in self.started:
            server.interrupt()
        for server in self.started:
            server.wait_stopped()
        for server in self.started:
            print(server.log_tail())

    def kill_all(self) -> None:
        """SIGKILL every server still running, then print the logs: for a test that has checked what
        it needed, where a graceful stop (a drain of the poller, closing the sandbox) is not what it
        tests and would only be waited for. Their poller processes and tool sandboxes die with them."""
        for server in self.started:
            if server.process.poll() is None:
                server.process.send_signal(signal.SIGKILL)
        for server in self.started:
            server.process.wait(timeout=STOP_TIMEOUT)
        for server in self.started:
            print(server.log_tail())


# Creating through a server process.

_SLOW_TOOL = '''
def slow_lookup(order_id: str) -> str:
    """Look up an order, slowly.

    Args:
        order_id: The order's identifier.
    """
    import socket, time

    with socket.create_connection(("127.0.0.1", PORT)) as log:
        log.sendall(order_id.encode() + b"\\n")
        log.shutdown(socket.SHUT_WR)
        starts = int(log.makefile().read() or "1")
    time.sleep(SECONDS if starts == 1 else AGAIN)
    return "order " + order_id + " shipped"
'''


class ToolCallLog:
    """Where ``slow_lookup`` reports each start (and learns how many times it started with its
    ``order_id``): a listener on the host's loopback.

    A sandboxed tool writes no file of the host; it reaches this through the network, so the
    servers that run it need ``NIGHTSHIFT_TOOL_NETWORK=outbound`` (``SLOW_TOOL_ENV``).
    """

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name="tool-call-log", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return  # closed
            # A tool killed with its server mid-call leaves a broken connection: the next one is served.
            with contextlib.suppress(OSError), connection, connection.makefile("rb") as lines:
                starts = 0
                for line in lines:
                    with self._lock:
                        order_id = line.decode().strip()
                        self._calls[order_id] += 1
                        starts = self._calls[order_id]
                if starts:  # the tool's answer: how many times it has started with this order_id
                    connection.sendall(str(starts).encode())

    def calls(self) -> Counter[str]:
        """How many times ``slow_lookup`` started, by ``order_id``."""
        with self._lock:
            return Counter(self._calls)

    def close(self) -> None:
        # Closing a socket does not wake a thread blocked in its accept(); shutting it down does.
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()
        self._thread.join(timeout=5)
        assert not self._thread.is_alive(), "the tool call log's listener did not stop"


SLOW_TOOL_ENV = {"NIGHTSHIFT_TOOL_NETWORK": "outbound"}


def slow_tool_source(log: ToolCallLog, seconds: float, *, again: float | None = None) -> str:
    """A custom tool ``slow_lookup(order_id)`` that reports ``order_id`` to ``log`` as it starts,
    then sleeps ``seconds``: how many times a tool ran, and while it runs.

    Args:
        log: Where the tool reports its starts.
        seconds: How long its first call with an ``order_id`` sleeps.
        again: How long a later call with the same ``order_id`` sleeps (default ``seconds``): a
            test that needs only the first call in flight (to stop its server then) need not
            wait as long for the call run again.
    """
    source = _SLOW_TOOL.replace("PORT", str(log.port)).replace("AGAIN", repr(seconds if again is None else again))
    return source.replace("SECONDS", repr(seconds))


async def create_agent(client: httpx.AsyncClient, name: str, model: str, **extra: Any) -> dict[str, Any]:
    """An agent made through the API."""
    return await Runs(client).agent(name, model=model, **extra)


def fact_of(agent: dict[str, Any]) -> str:
    """What an agent's first step saves to its memory."""
    return f"{agent['name']} likes the colour teal"


async def batch_creates(admin: EmulatorAdmin) -> list[dict[str, Any]]:
    """Every batch the emulator was asked to create, on any of its APIs."""
    anthropic = await admin.requests(path="/v1/messages/batches", method="POST")
    openai = await admin.requests(path="/v1/batches", method="POST")
    gemini = [r for r in await admin.requests(method="POST") if r["path"].endswith(":batchGenerateContent")]
    return anthropic + openai + gemini


# Reading back what the servers stored, to check that every message is there exactly once.


def transcript(parts: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """An agent's stored messages (its Letta message parts grouped by stored id) as labels, and their ids.

    Labels: ``system``, ``user:<text>``, ``heartbeat``, ``call:<tool>``, ``return:<tool>:<status>``.
    """
    groups: list[tuple[str, list[dict[str, Any]]]] = []
    for part in parts:
        if groups and groups[-1][0] == part["id"]:
            groups[-1][1].append(part)
        else:
            groups.append((part["id"], [part]))
    labels = []
    for _, group in groups:
        types = [p["message_type"] for p in group]
        assert len(types) == len(set(types)), f"one stored message shown with repeated parts: {types}"
        if "system_message" in types:
            labels.append("system")
        elif "user_message" in types:
            content = group[0]["content"]
            labels.append("heartbeat" if '"type": "heartbeat"' in content else f"user:{content}")
        elif "tool_return_message" in types:
            labels.append(f"return:{group[0]['name']}:{group[0]['status']}")
        elif "tool_call_message" in types:
            calls = [p["tool_call"]["name"] for p in group if p["message_type"] == "tool_call_message"]
            labels.append("call:" + ",".join(calls))
        else:  # send_message is shown as an assistant message
            labels.append("call:send_message")
    return labels, [i for i, _ in groups]


async def stored_before(client: httpx.AsyncClient, agent_ids: Iterable[str]) -> dict[str, list[str]]:
    """Each agent's stored messages as labels (before a run: the system message and a new agent's greeting)."""
    runs = Runs(client)
    return {agent_id: transcript(await runs.context(agent_id))[0] for agent_id in agent_ids}


async def assert_messages_once(
    client: httpx.AsyncClient, run_id: str, expected: dict[str, list[str]], before: dict[str, list[str]]
) -> dict[str, dict[str, Any]]:
    """Every agent holds exactly the messages ``expected`` of it (labels), once each, after ``before``.

    Checked in three places that must agree: the agent's stored messages, its context window
    (``message_ids``) and the run's messages. Returns each agent as ``GET /v1/agents/{id}`` shows it.
    """
    runs = Runs(client)
    run_messages = await runs.messages(run_id)
    ids = [m["id"] for m in run_messages]
    assert len(ids) == len(set(ids)), "the run lists a message twice"
    per_agent = Counter(m["agent_id"] for m in run_messages)
    assert per_agent == {a: len(labels) for a, labels in expected.items()}, per_agent
    tool_call_ids = [c["id"] for m in run_messages for c in m.get("tool_calls") or []]
    assert len(tool_call_ids) == len(set(tool_call_ids)), "a tool call was stored twice"
    agents: dict[str, dict[str, Any]] = {}
    for agent_id, labels_expected in expected.items():
        labels, stored_ids = transcript(await runs.context(agent_id))
        assert labels == before[agent_id] + labels_expected, f"{agent_id}: {labels}"
        agent = (await client.get(f"/v1/agents/{agent_id}")).json()
        assert agent["message_ids"] == stored_ids, f"{agent_id}: the context window differs from the stored messages"
        run_ids = [m["id"] for m in run_messages if m["agent_id"] == agent_id]
        assert run_ids == stored_ids[len(before[agent_id]) :], f"{agent_id}: the run's messages differ"
        agents[agent_id] = agent
    return agents
