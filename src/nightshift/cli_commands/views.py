"""How the client commands show agents, runs and messages: rich tables and one-line texts.

Everything here is pure: it takes the API's JSON bodies and returns renderables or strings.
Steps are shown as people count them, from 1 (``shown_step``); the API counts from 0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from nightshift.domain.batches import BatchRunStatus

STATUS_STYLE = {
    BatchRunStatus.CREATED: "yellow",
    BatchRunStatus.RUNNING: "cyan",
    BatchRunStatus.COMPLETED: "green",
    BatchRunStatus.FAILED: "red",
    BatchRunStatus.CANCELLED: "magenta",
}
# A run in these is still to be stepped: a provider problem is current.
OPEN_STATUSES = frozenset({BatchRunStatus.CREATED.value, BatchRunStatus.RUNNING.value})
# A completed run in which some agents failed: done, but not all well.
PARTLY_STYLE = "yellow"


def agents_table(agents: Sequence[Mapping[str, Any]], *, title: str | None = None) -> Table:
    """Agents: id, name, model, tags and their custom tools."""
    table = Table(title=title, title_justify="left")
    table.add_column("id", no_wrap=True)
    table.add_column("name", style="bold", overflow="fold")
    table.add_column("model", overflow="fold")
    table.add_column("tags", overflow="fold")
    table.add_column("custom tools", overflow="fold")
    for agent in agents:
        custom = [t["name"] for t in agent.get("tools", []) if t.get("tool_type") == "custom"]
        table.add_row(agent["id"], agent["name"], agent["model"], ", ".join(agent.get("tags", [])), ", ".join(custom))
    return table


def runs_table(runs: Sequence[Mapping[str, Any]]) -> Table:
    """Batch runs: id, name (when some run has one), status, when, agents done (finished), failed,
    step, cost and kind (main or sleeptime)."""
    names = [run_name(run) for run in runs]
    table = Table()
    table.add_column("id", no_wrap=True)
    if any(names):
        table.add_column("name", overflow="fold")
    table.add_column("status")
    table.add_column("created", no_wrap=True)
    table.add_column("agents done", justify="right", no_wrap=True)
    table.add_column("failed", justify="right", no_wrap=True)
    table.add_column("step", justify="right", no_wrap=True)
    table.add_column("cost", justify="right", no_wrap=True)
    # Last, so that the columns scripts cut out stay where they were.
    table.add_column("kind", no_wrap=True)
    for run, name in zip(runs, names, strict=True):
        counts = run["progress"]["agents"]
        done, total = agents_done(counts)
        table.add_row(
            run["id"],
            *([Text(name or "")] if any(names) else []),
            run_status_text(run),
            _local(run["created_at"]),
            f"{done}/{total}",
            str(counts.get("failed", 0)),
            str(shown_step(run["progress"]["step"])),
            money(run["progress"]["cost_usd"]),
            run_kind(run),
        )
    return table


def run_name(run: Mapping[str, Any]) -> str | None:
    """The run's name: its metadata's ``name`` (what ``batch submit --name`` and the Python client
    set), if it is a non-empty string."""
    name = (run.get("metadata") or {}).get("name")
    return name if isinstance(name, str) and name else None


def run_kind(run: Mapping[str, Any]) -> str:
    """``main`` (a run someone asked for) or ``sleeptime`` (sleep-time agents' upkeep); a server
    older than kinds of runs has main runs only."""
    kind = run.get("kind") or "main"
    return str(kind)


def costs_table(kinds: Sequence[Mapping[str, Any]]) -> Table:
    """The organization's batch runs by kind, all told: runs, agents, requests, tokens, cost, and what
    the normal API would have charged for the same tokens."""
    table = Table()
    table.add_column("kind", no_wrap=True, style="bold")
    table.add_column("runs", justify="right", no_wrap=True)
    table.add_column("agents", justify="right", no_wrap=True)
    table.add_column("requests", justify="right", no_wrap=True)
    table.add_column("tokens", overflow="fold")
    table.add_column("cost", justify="right", no_wrap=True)
    table.add_column("normal API", justify="right", no_wrap=True)
    table.add_column("prompt cache", overflow="fold")
    for kind in kinds:
        table.add_row(
            kind["kind"],
            str(kind["runs"]),
            str(kind["agents"]),
            str(kind["requests"]),
            tokens(kind.get("usage", {})) or "0",
            money(kind["cost_usd"]),
            money(kind["cost_without_batch_usd"]),
            saving(kind.get("cache_savings_usd", 0.0)),
        )
    return table


def run_summary(run: Mapping[str, Any]) -> RenderableType:
    """The end of ``batch watch``: what the run did and what it cost, and which agents failed."""
    progress = run["progress"]
    counts = progress["agents"]
    _, total = agents_done(counts)
    usage = progress.get("usage", {})
    table = Table(title=f"batch run {run['id']}", title_justify="left", show_header=False)
    table.add_column("", style="bold")
    table.add_column("")
    if run_name(run):
        table.add_row("name", Text(str(run_name(run))))
    table.add_row("kind", run_kind(run))
    table.add_row("status", run_status_text(run))
    if run.get("error"):
        table.add_row("error", Text(str(run["error"])))
    table.add_row("agents", f"{total} ({agent_counts(counts)})")
    table.add_row("steps", str(_steps(run)))
    table.add_row("provider batches", str(len(progress.get("provider_batches", []))))
    table.add_row("tokens", tokens(usage) or "none")
    table.add_row(
        "cost",
        f"{money(progress['cost_usd'])} (without the batch discount: {money(progress['cost_without_batch_usd'])})",
    )
    table.add_row("savings", savings(progress))
    if run.get("deadline"):
        table.add_row("deadline", takeover_text(run))
    table.add_row("took", duration(run["created_at"], run.get("completed_at") or run["updated_at"]))
    failures = progress.get("failures") or []
    if not failures:
        return table
    failed = Table(title="failed agents", title_justify="left")
    failed.add_column("agent", no_wrap=True)
    failed.add_column("step", justify="right")
    failed.add_column("error")
    for failure in failures[:20]:
        agent = failure.get("agent_name") or failure["agent_id"]
        if failure.get("agent_deleted"):
            agent += " (deleted)"
        failed.add_row(agent, str(shown_step(failure["step_number"])), failure.get("error") or "")
    rows: list[RenderableType] = [table, failed]
    if len(failures) > 20:
        rows.append(Text(f"... and {len(failures) - 20} more"))
    return Group(*rows)


def takeover_text(run: Mapping[str, Any]) -> str:
    """A run's deadline and what its take-overs did: "in 30 min 00 s; 28 requests taken over,
    $0.0191 above batch prices" (the deadline as a time from the run's creation)."""
    progress = run["progress"]
    taken = sum(b.get("taken_over", 0) for b in progress.get("provider_batches", []))
    within = f"in {duration(run['created_at'], run['deadline'])}"
    if not taken:
        return f"{within}; nothing taken over"
    cost = money(progress.get("takeover_usd", 0.0))
    return f"{within}; {taken:,} request{'s' * (taken != 1)} taken over, {cost} above batch prices"


def progress_line(run: Mapping[str, Any]) -> str:
    """One line of progress, for ``batch watch`` when the output is not a terminal; the run's
    provider problem, if any, after it."""
    progress = run["progress"]
    done, total = agents_done(progress["agents"])
    # A sleep-time run says so; a main run reads as runs always did.
    kind = f" ({run_kind(run)})" if run_kind(run) != "main" else ""
    line = (
        f"{run['id']}{kind}: {run_status(run)}, step {shown_step(progress['step'])}, {done}/{total} agents done "
        f"({agent_counts(progress['agents'])}), cost {money(progress['cost_usd'])}"
    )
    problem = provider_problem(run)
    return f"{line}; {problem}" if problem else line


def provider_problem(run: Mapping[str, Any]) -> str | None:
    """The run's latest provider problem in a sentence (its ``progress.last_error``), while the
    run is open: "anthropic error (submit, attempt 2, tried again at 14:05:31): cannot reach
    Anthropic at ...: connection refused". None when there is none, or the run has ended (the failed agents
    say it then)."""
    error = run["progress"].get("last_error")
    if not error or run["status"] not in OPEN_STATUSES:
        return None
    said = [error["stage"]] if error.get("stage") else []
    if error.get("attempts"):
        said.append(f"attempt {error['attempts']}")
    if error.get("retrying") and error.get("retry_at"):
        said.append(f"tried again at {_local(error['retry_at'], time_only=True)}")
    where = f" ({', '.join(said)})" if said else ""
    return f"{error['provider']} error{where}: {error['error']}"


def stats_text(run: Mapping[str, Any]) -> Text:
    """The lines under ``batch watch``'s progress bar: step, provider batches, tokens and cost."""
    progress = run["progress"]
    batches = progress.get("provider_batches", [])
    open_batches = sum(1 for b in batches if b["status"] not in ("applied", "cancelled"))
    end = run.get("completed_at") or datetime.now(UTC).isoformat()
    text = Text()
    text.append(f"{run_kind(run)} run · ")
    text.append(f"step {shown_step(progress['step'])}", style="bold")
    text.append(f" · provider batches {len(batches)} ({open_batches} open)")
    text.append(f" · {duration(run['created_at'], end)}\n")
    text.append(f"tokens {tokens(progress.get('usage', {})) or '0'}\n")
    text.append(f"cost {money(progress['cost_usd'])}", style="bold green")
    text.append(f" (without the batch discount {money(progress['cost_without_batch_usd'])})")
    text.append(f" · {savings(progress)}")
    problem = provider_problem(run)
    if problem:
        text.append(f"\n{problem}", style="bold red")
    return text


def messages_table(messages: Sequence[Mapping[str, Any]], agent_names: Mapping[str, str]) -> Table:
    """A run's messages as conversations, one agent after the other (in the order they first appear).

    Each row: time, agent, role, and the text, tool call or tool result.
    """
    table = Table()
    table.add_column("time", no_wrap=True, style="dim")
    table.add_column("agent", no_wrap=True)  # a name, or the id of an agent deleted since
    table.add_column("role", no_wrap=True)
    table.add_column("message")
    by_agent: dict[str, list[tuple[Mapping[str, Any], Text]]] = {}
    for message in messages:
        shown = message_text(message)
        if shown is not None:
            by_agent.setdefault(message["agent_id"], []).append((message, shown))
    for agent_id, rows in by_agent.items():
        agent = agent_names.get(agent_id, agent_id)
        for index, (message, shown) in enumerate(rows):
            table.add_row(
                _local(message["created_at"], time_only=True),
                agent if index == 0 else "",
                message["role"],
                shown,
                end_section=index == len(rows) - 1,
            )
    return table


def message_text(message: Mapping[str, Any]) -> Text | None:
    """What a person wants to read of one message; None for the "Sent message" acknowledgements."""
    role = message["role"]
    parts = message.get("content") or []
    texts = [p["text"] for p in parts if p.get("type") == "text"]
    text = Text()
    if role == "tool":
        name = message.get("name") or "tool"
        status, result = _tool_result("\n".join(texts))
        if name == "send_message" and status == "OK":
            return None
        text.append(f"{name} → ", style="bold")
        text.append(result, style="red" if status not in ("OK", None) else "")
        return text
    if role == "user":
        event = _event("\n".join(texts))
        if event is not None:
            text.append(f"({event})", style="dim")
        else:
            text.append("\n".join(texts))
        return text
    for part in parts:
        if part.get("type") == "reasoning" and part.get("reasoning"):
            text.append(part["reasoning"] + "\n", style="dim italic")
    if texts:
        text.append("\n".join(texts) + "\n")
    for call in message.get("tool_calls") or []:
        name = call["function"]["name"]
        arguments = _arguments(call["function"].get("arguments", ""))
        if name == "send_message" and isinstance(arguments.get("message"), str):
            text.append(arguments["message"] + "\n", style="bold")
            continue
        shown = ", ".join(
            f"{k}={json.dumps(v, ensure_ascii=False)}"
            for k, v in arguments.items()
            if k not in ("inner_thoughts", "request_heartbeat")
        )
        text.append(f"calls {name}({shown})\n", style="cyan")
    text.rstrip()
    return text


def shown_step(step_number: int) -> int:
    """A step as people count it: the API's ``step`` and ``step_number`` count from 0, people from 1."""
    return step_number + 1


def run_status(run: Mapping[str, Any]) -> str:
    """The run's status as people read it: Letta's status, which the API keeps (a run is completed
    when some agent finished), and for a completed run with failed agents, how many of how many
    failed: "completed, 3 of 20 failed"."""
    counts = run["progress"]["agents"]
    failed = counts.get("failed", 0)
    if run["status"] == BatchRunStatus.COMPLETED.value and failed:
        _, total = agents_done(counts)
        return f"completed, {failed} of {total} failed"
    return str(run["status"])


def run_status_text(run: Mapping[str, Any]) -> Text:
    """``run_status`` in its colour: yellow, not green, for a completed run with failed agents."""
    shown = run_status(run)
    return status_text(run["status"]) if shown == run["status"] else Text(shown, style=PARTLY_STYLE)


def status_text(status: str) -> Text:
    try:
        style = STATUS_STYLE[BatchRunStatus(status)]
    except ValueError:
        style = ""
    return Text(status, style=style)


def agents_done(counts: Mapping[str, int]) -> tuple[int, int]:
    """(agents that finished, all agents of the run) from ``progress.agents``: an agent that failed
    or was cancelled is not done, so a run is 100% done only when every agent finished."""
    finished = counts.get("finished", 0)
    total = finished + sum(counts.get(k, 0) for k in ("failed", "cancelled", "running"))
    return finished, total


def agent_counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{counts.get(k, 0)} {k}" for k in ("finished", "failed", "cancelled", "running") if counts.get(k))


def tokens(usage: Mapping[str, int]) -> str:
    labels = {
        "input_tokens": "in",
        "output_tokens": "out",
        "cache_read_tokens": "cache read",
        "cache_write_tokens": "cache write",
    }
    return " · ".join(f"{usage[k]:,} {label}" for k, label in labels.items() if usage.get(k))


def savings(costs: Mapping[str, float]) -> str:
    """What the batch discount and the prompt cache saved, from a run's or an agent's costs:
    "batch saved $0.0125, prompt cache cost $0.0004 more than it saved"."""
    batch = costs.get("batch_savings_usd", costs["cost_without_batch_usd"] - costs["cost_usd"])
    return f"{saving(batch, 'batch')}, {saving(costs.get('cache_savings_usd', 0.0), 'prompt cache')}"


def saving(amount: float, by: str | None = None) -> str:
    """A saving that reads right either way (the dashboard's ``savingText`` too): "saved $0.0125",
    or, when it is negative, what it cost: "cost $0.0014 more than it saved". The prompt cache
    loses money when its writes (dearer than plain input) are not read back enough; "saved
    -$0.0014" would read as a saving.

    Args:
        amount: Dollars saved; negative for a loss.
        by: What saved it, put first ("prompt cache saved $0.0003").
    """
    who = f"{by} " if by else ""
    if round(amount, 4) < 0:
        return f"{who}cost {money(-amount)} more than it saved"
    return f"{who}saved {money(amount)}"


def money(value: float) -> str:
    """Dollars as every screen shows them (the dashboard's ``formatUsd`` too): cents from $1 up,
    else four decimals; a negative amount as ``-$0.0012`` (a saving that is a loss reads better
    through ``saving``)."""
    sign = "-" if value < 0 and round(abs(value), 4) > 0 else ""
    value = abs(value)
    return sign + (f"${value:,.2f}" if value >= 1 else f"${value:.4f}")


def duration(start: str, end: str) -> str:
    seconds = max(0.0, (_parse(end) - _parse(start)).total_seconds())
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s"


def _steps(run: Mapping[str, Any]) -> int:
    numbers = {b["step_number"] for b in run["progress"].get("provider_batches", [])}
    return len(numbers)


def _tool_result(text: str) -> tuple[str | None, str]:
    try:
        body = json.loads(text)
    except ValueError:
        return None, text
    if isinstance(body, dict) and "message" in body:
        return str(body.get("status")), str(body["message"])
    return None, text


def _event(text: str) -> str | None:
    """The type of a system event sent as a user message (a heartbeat, a login), or None."""
    try:
        body = json.loads(text)
    except ValueError:
        return None
    kind = body.get("type") if isinstance(body, dict) else None
    return kind if isinstance(kind, str) else None


def _arguments(raw: str) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {"arguments": raw}
    return value if isinstance(value, dict) else {"arguments": value}


def _parse(stamp: str) -> datetime:
    moment = datetime.fromisoformat(stamp)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _local(stamp: str, *, time_only: bool = False) -> str:
    moment = _parse(stamp).astimezone()
    return moment.strftime("%H:%M:%S" if time_only else "%Y-%m-%d %H:%M")
