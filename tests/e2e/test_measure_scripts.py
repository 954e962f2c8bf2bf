"""The measuring scripts (``make bench``, ``load``, ``submit``, ``sandbox``, ``polling``, ``cost``,
``deadline``) keep working: each runs end to end on a few agents (or calls) and prints its figures
(the figures themselves are for people to read, never asserted on; what they show of behaviour, a
deadline met, is)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# The scripts are no part of the installed package: they run from the checkout, as make runs them.
CHECKOUT = Path(__file__).parents[2]


def _run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", *args],
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=_env(),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("NIGHTSHIFT_")} | {"COLUMNS": "160"}


def test_bench_prints_each_phase_of_its_runs() -> None:
    output = _run("benchmarks.bench", "--agents", "4", "--history", "2")
    phases = (
        "create the run",
        "write step 1 + submit it",
        "poll + resume step 1 (memory tool)",
        "(custom tool)",
        "gather the due sleep-time agents",
        "poll + resume sleep-time step 2 (run ends)",
    )
    for phase in phases:
        assert phase in output, output
    # SQLite's work is the server's own: no database CPU apart ("-"), in each of the three runs.
    rows = [line.split("│") for line in output.splitlines() if "create the run" in line]
    assert [row[7].strip() for row in rows] == ["-"] * 3, output
    assert "database: sqlite" in output, output
    # Each agent had two earlier turns in its window, and every run stepped its agents to the end.
    assert "each agent's window before its run: its first messages and 2 earlier turns" in output, output
    assert "the memory run ended completed; its agents' steps: 4 continued, 4 finished" in output, output
    assert "the custom run ended completed; its agents' steps: 4 continued, 4 finished" in output, output
    # The sleep-time agents inserted what their users stated, then finished their edits.
    assert "the sleeptime (sleeptime) run ended completed; its agents' steps: 4 continued, 4 finished" in output
    assert re.search(r"peak memory \(RSS\) of the server process: [\d,]+ MiB", output), output


@pytest.mark.parametrize("empty_db_url", ["postgresql"], indirect=True)
def test_bench_counts_the_database_cpu_apart_on_postgresql(empty_db_url: str) -> None:
    output = _run("benchmarks.bench", "--agents", "4", "--tools", "memory", "--database-url", empty_db_url)
    rows = [line.split("│") for line in output.splitlines() if "create the run" in line]
    assert len(rows) == 1, output
    assert re.fullmatch(r"\d+\.\d{3}", rows[0][7].strip()), output  # PostgreSQL's CPU per agent
    assert "database: postgresql" in output, output


def test_load_prints_latencies_without_errors() -> None:
    output = _run("benchmarks.load", "--agents", "4", "--clients", "4", "--seconds", "1")
    rows = {line.split("│")[1].strip(): line.split("│")[2:] for line in output.splitlines() if line.count("│") == 10}
    assert set(rows) == {"no run going", "while the run steps"}, output
    for cells in rows.values():
        assert int(cells[0]) > 0 and cells[-3].strip() == "0", output  # requests answered, no errors
    assert "the run took" in output


@pytest.mark.parametrize(("flags", "title"), [((), "the same agents"), (("--new-agents",), "new agents")])
def test_submit_times_each_round_until_the_provider_has_the_batch(flags: tuple[str, ...], title: str) -> None:
    output = _run("benchmarks.submit", "--agents", "3", "--rounds", "2", *flags)
    assert f"3 agents, anthropic, {title} each round" in output, output
    rows = {line.split("│")[1].strip(): line.split("│")[2:-1] for line in output.splitlines() if line.count("│") == 6}
    assert set(rows) == {"1", "2", "median of 2-2"}, output
    for name in ("1", "2"):
        answered, took, per_agent, cpu = (float(cell) for cell in rows[name])
        # The provider has the batch after the POST's answer (the poller submits it); took is shown to the ms.
        assert 0 < answered / 1000 <= took and per_agent == pytest.approx(took * 1000 / 3, abs=0.17), output
        assert cpu > 0, output
    assert rows["median of 2-2"] == rows["2"], output


def test_sandbox_splits_a_call_beside_the_floor_of_a_bare_fork() -> None:
    output = _run("benchmarks.sandbox", "--calls", "20")
    rows = {line.split("│")[1].strip(): line.split("│")[2:-1] for line in output.splitlines() if line.count("│") == 9}
    assert set(rows) == {"bare fork + exit (the floor)", "one call at a time", "run_many on 2 workers"}, output
    floor = [float(cell) for cell in rows.pop("bare fork + exit (the floor)")[2:]]
    for name, cells in rows.items():
        wall, server, zygote, call, sandbox, zygote_faults, call_faults = (float(cell) for cell in cells)
        assert wall > 0 and server > 0 and sandbox == pytest.approx(zygote + call, abs=0.002), (name, output)
        # A call's processes write more pages than a fork that does nothing (their faults are counted exactly).
        assert zygote_faults > floor[3] and call_faults > floor[4], (name, output)
    assert "hypervisor took" in output, output


def test_paced_load_states_its_offered_load() -> None:
    mix = "agent,agents,messages,runs"  # the run itself left out
    output = _run(
        "benchmarks.load", "--agents", "4", "--clients", "4", "--seconds", "1", "--rate", "5", "--mix", mix, "--slow"
    )
    assert "each 5 requests/s (poisson), 20 requests/s offered" in output, output
    assert "reads: agent, agents, messages, runs, in equal shares" in output, output
    # One more column than unpaced: how late the readers sent their requests.
    rows = {line.split("│")[1].strip(): line.split("│")[2:] for line in output.splitlines() if line.count("│") == 11}
    assert set(rows) == {"no run going", "while the run steps"}, output
    for cells in rows.values():
        assert int(cells[0]) > 0 and cells[-4].strip() == "0" and int(cells[-2]) >= 0, output
    # --slow: the latencies by kind of read, which add up to the phase's requests, of the mix only...
    kinds: dict[str, dict[str, int]] = {}
    for line in output.splitlines():
        if line.count("│") == 7:
            phase, kind, requests = (cell.strip() for cell in line.split("│")[1:4])
            kinds.setdefault(phase, {})[kind] = int(requests)
    assert set(kinds) == set(rows), output
    assert set(kinds["no run going"]) <= {"agent", "agents", "messages", "runs"}, output
    assert set(kinds["while the run steps"]) <= {"agent", "agents", "messages", "runs"}, output
    for phase, cells in rows.items():
        assert sum(kinds[phase].values()) == int(cells[0]), output
    # ...and each phase says how many requests took over 100 ms (by second, when there are some).
    assert re.search(r"no run going: \d+ requests over 100 ms", output), output
    assert re.search(r"while the run steps: \d+ requests over 100 ms", output), output


def test_polling_steps_its_run_at_the_interval_then_on_the_schedule() -> None:
    output = _run(
        "benchmarks.polling", "--agents", "2", "--steps", "2", "--batch-seconds", "0.5", "--interval", "2",
        "--shortest", "0.1",
    )  # fmt: skip
    rows = [line.split("│") for line in output.splitlines() if "(fixed)" in line or "schedule," in line]
    assert len(rows) == 2, output
    for row in rows:
        seconds, polls = float(row[2]), int(row[3])
        assert seconds > 0 and polls >= 2, output  # two steps, each polled at least once


def test_cost_prices_each_shape_under_each_policy() -> None:
    output = _run("benchmarks.cost", "--agents", "3", "--steps", "1", "--steps", "3")
    for title in ("agents that did the task before", "new agents (their first task)"):
        assert title in output, output
    rows = [line.split("│") for line in output.splitlines() if "system prompt " in line]
    assert len(rows) == 8, output  # 2 tables x (1 and 3 steps) x (own and shared prompts)
    for row in rows:
        one_hour, five, off, _auto, normal, fixed = (float(cell) for cell in row[2:8])
        assert fixed == min(one_hour, five, off) and normal > 0, output
    # A task of one request, its prompt its own: auto writes nothing, as off.
    alone = [row for row in rows if "1 step, own" in row[1]]
    assert all(row[4] == row[5] and row[8].strip() == "- x1" for row in alone), output


def test_deadline_runs_the_same_run_without_and_with_a_deadline() -> None:
    # Which agents are held back is a hash of their random ids, the same at each step: half of 20
    # leaves none held back once in a million runs (a fifth did once in 90).
    output = _run("benchmarks.deadline", "--agents", "20", "--held-back", "0.5")
    rows = [line.split("│")[1:5] for line in output.splitlines() if "deadline" in line and "│" in line]
    assert len(rows) == 2, output
    (_, waited, steps, taken), (_, hurried, steps_too, taken_too) = rows
    # Without a deadline the run waits an hour for each step's stragglers; with one of ten minutes
    # it is done within them, every agent's three steps taken.
    assert float(waited.split()[0]) > 60 and float(hurried.split()[0]) <= 10, output
    assert int(steps) == int(steps_too) == 3, output
    assert taken.strip() == "0 + 0 + 0" and sum(map(int, taken_too.split("+"))) > 0, output
