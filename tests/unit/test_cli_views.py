"""How the CLI shows a run's provider problem and its name (``cli_commands/views``), from the API's JSON."""

from __future__ import annotations

from typing import Any

from rich.console import Console, RenderableType

from nightshift.cli_commands.views import costs_table, progress_line, run_summary, runs_table, stats_text

ERROR = {
    "provider": "anthropic",
    "provider_batch_id": "llm_batch-1",
    "step_number": 0,
    "stage": "submit",
    "error": "cannot reach Anthropic at http://127.0.0.1:9/v1/messages/batches: connection refused",
    "attempts": 2,
    "retrying": True,
    "retry_at": "2026-12-01T01:01:00+00:00",
}


def run(status: str = "running", last_error: dict[str, Any] | None = ERROR, **fields: Any) -> dict[str, Any]:
    return {
        "id": "batch-1",
        "status": status,
        "created_at": "2026-12-01T01:00:00+00:00",
        "updated_at": "2026-12-01T01:00:30+00:00",
        "completed_at": None,
        "metadata": {},
        "progress": {
            "step": 0,
            "agents": {"running": 4, "finished": 0, "failed": 0, "cancelled": 0},
            "usage": {},
            "cost_usd": 0.0,
            "cost_without_batch_usd": 0.0,
            "batch_savings_usd": 0.0,
            "cache_savings_usd": 0.0,
            "provider_batches": [],
            "failures": [],
            "last_error": last_error,
        },
        **fields,
    }


def rendered(renderable: RenderableType) -> list[str]:
    """The lines a 200-column terminal shows of ``renderable``."""
    console = Console(width=200, record=True)
    console.print(renderable)
    return console.export_text().splitlines()


def test_the_progress_line_ends_with_the_provider_problem() -> None:
    line = progress_line(run())
    assert line.startswith("batch-1: running, step 1, 0/4 agents done (4 running), cost $0.0000; ")
    assert "anthropic error (submit, attempt 2, tried again at " in line
    assert line.endswith("): cannot reach Anthropic at http://127.0.0.1:9/v1/messages/batches: connection refused")


def test_the_live_view_shows_the_provider_problem_under_the_figures() -> None:
    shown = stats_text(run()).plain.splitlines()
    assert shown[-1].startswith("anthropic error (submit, attempt 2")
    assert shown[-1].endswith("connection refused")


def test_no_problem_once_the_run_has_ended_or_without_one() -> None:
    assert progress_line(run(last_error=None)).endswith("cost $0.0000")
    assert progress_line(run(status="failed")).endswith("cost $0.0000")  # the failed agents say it then
    given_up = {**ERROR, "stage": None, "retrying": False, "retry_at": None, "error": "gave up after 5 failures"}
    assert progress_line(run(last_error=given_up)).endswith("; anthropic error (attempt 2): gave up after 5 failures")


def test_runs_table_has_a_name_column_when_a_run_has_a_name() -> None:
    lines = rendered(runs_table([run(metadata={"name": "nightly [digest]"}), run(id="batch-2")]))
    assert "name" in lines[1]
    assert "nightly [digest]" in next(line for line in lines if "batch-1" in line)  # not read as markup
    assert "name" not in rendered(runs_table([run(id="batch-2")]))[1]


def test_a_sleeptime_run_says_its_kind_and_a_main_run_reads_as_before() -> None:
    assert progress_line(run(last_error=None, kind="sleeptime")).startswith("batch-1 (sleeptime): running, step 1")
    assert progress_line(run(last_error=None, kind="main")).startswith("batch-1: running, step 1")
    assert stats_text(run(kind="sleeptime")).plain.startswith("sleeptime run · step 1")
    lines = rendered(runs_table([run(kind="sleeptime"), run(id="batch-2")]))  # a server without kinds: main
    assert "kind" in lines[1]
    assert "sleeptime" in next(line for line in lines if "batch-1" in line)
    assert "main" in next(line for line in lines if "batch-2" in line)


def test_the_costs_table_shows_each_kind_with_the_normal_apis_price() -> None:
    kinds = [
        {"kind": "main", "runs": 3, "agents": 2, "requests": 7, "usage": {"input_tokens": 1200, "output_tokens": 80}}
        | {"cost_usd": 0.0125, "cost_without_batch_usd": 0.025, "batch_savings_usd": 0.0125, "cache_savings_usd": 0.0},
        {"kind": "sleeptime", "runs": 1, "agents": 1, "requests": 2, "usage": {"output_tokens": 9}}
        | {"cost_usd": 0.002, "cost_without_batch_usd": 0.004, "batch_savings_usd": 0.002, "cache_savings_usd": -0.001},
    ]
    lines = rendered(costs_table(kinds))
    main = next(line for line in lines if " main " in line)
    assert "$0.0125" in main and "$0.0250" in main and "1,200 in" in main
    sleeptime = next(line for line in lines if "sleeptime" in line)
    assert "$0.0020" in sleeptime and "$0.0040" in sleeptime and "cost $0.0010 more than it saved" in sleeptime


def test_the_summary_of_a_run_with_a_deadline_says_what_was_taken_over() -> None:
    batches = [{"step_number": s, "taken_over": n} for s, n in ((0, 3), (1, 0))]
    ended = run("completed", None, completed_at="2026-12-01T01:09:00+00:00", deadline="2026-12-01T01:10:00+00:00")
    ended["progress"] |= {"provider_batches": batches, "takeover_usd": 0.0191}
    lines = rendered(run_summary(ended))
    wanted = "in 10 min 00 s; 3 requests taken over, $0.0191 above batch prices"
    assert any("deadline" in line and wanted in line for line in lines), lines
    ended["progress"]["provider_batches"] = [{"step_number": 0, "taken_over": 0}]
    assert any("in 10 min 00 s; nothing taken over" in line for line in rendered(run_summary(ended)))
    assert not any("deadline" in line for line in rendered(run_summary(run("completed", None))))


def test_the_summary_of_a_run_that_failed_before_its_first_step_says_why() -> None:
    reason = "every agent of the run was deleted before its first step"
    failed = run("failed", None, completed_at="2026-12-01T01:00:01+00:00", error=reason)
    assert any(line.split() == ["│", "error", "│", *reason.split(), "│"] for line in rendered(run_summary(failed)))
    assert not any("error" in line for line in rendered(run_summary(run("completed", None))))
