"""How the CLI shows what a run cost and saved (``cli_commands/views``), from the API's JSON."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from nightshift.cli_commands.views import money, run_summary, saving, stats_text

PROGRESS: dict[str, Any] = {
    "step": 1,
    "agents": {"running": 0, "finished": 2, "failed": 0, "cancelled": 0},
    "usage": {"input_tokens": 1_000, "output_tokens": 200, "cache_read_tokens": 5_000, "cache_write_tokens": 3_000},
    "cost_usd": 0.0125,
    "cost_without_batch_usd": 0.025,
    "batch_savings_usd": 0.0125,
    "cache_savings_usd": -0.0004,
    "provider_batches": [],
    "failures": [],
}
RUN = {
    "id": "batch-1",
    "status": "completed",
    "created_at": "2026-12-01T01:00:00+00:00",
    "updated_at": "2026-12-01T01:00:30+00:00",
    "completed_at": "2026-12-01T01:00:30+00:00",
    "progress": PROGRESS,
}


def test_money_shows_losses_with_the_sign_first() -> None:
    assert (money(0.0125), money(-0.0004), money(-0.00001), money(1234.5)) == (
        "$0.0125",
        "-$0.0004",
        "$0.0000",
        "$1,234.50",
    )


def test_watch_shows_the_cache_savings_beside_the_batch_savings() -> None:
    assert "batch saved $0.0125, prompt cache cost $0.0004 more than it saved" in stats_text(RUN).plain


def test_a_saving_that_lost_money_reads_as_a_cost() -> None:
    assert (saving(0.0125), saving(-0.0014, "prompt cache"), saving(-0.00001), saving(0.0)) == (
        "saved $0.0125",
        "prompt cache cost $0.0014 more than it saved",
        "saved $0.0000",
        "saved $0.0000",
    )


def test_the_summary_has_a_row_of_savings() -> None:
    console = Console(width=200, record=True)
    console.print(run_summary(RUN))
    lines = console.export_text().splitlines()
    assert any(
        "savings" in line and "batch saved $0.0125, prompt cache cost $0.0004 more than it saved" in line
        for line in lines
    )
    assert not any("-$" in line for line in lines)
    assert any("cost" in line and "$0.0125 (without the batch discount: $0.0250)" in line for line in lines)
