"""The ``Metrics`` object: its own registry, the cluster census as gauges, the token kinds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client.parser import text_string_to_metric_families

from nightshift.domain.batch_progress import BatchCensus
from nightshift.domain.batches import BatchRunKind, BatchRunStatus, ProviderBatchStatus
from nightshift.domain.usage import Usage
from nightshift.metrics import ErrorScope, Metrics

NOW = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
EMPTY = BatchCensus(runs={}, provider_batches={}, agents_stepping=0, oldest_due_at=None)


def samples(metrics: Metrics, census: BatchCensus = EMPTY) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition(census, NOW).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_each_metrics_object_counts_alone() -> None:
    first, second = Metrics(), Metrics()
    first.sandbox_calls(3, 1)
    first.provider_error("openai", "rate_limit_error", ErrorScope.CALL, 2)
    assert samples(first)["nightshift_sandbox_calls_total", ()] == 3
    assert samples(first)["nightshift_sandbox_failures_total", ()] == 1
    key = (
        "nightshift_provider_errors_total",
        (("kind", "rate_limit_error"), ("provider", "openai"), ("scope", "call")),
    )
    assert samples(first)[key] == 2
    assert samples(second)["nightshift_sandbox_calls_total", ()] == 0
    assert key not in samples(second)


def test_the_census_becomes_gauges_with_every_status() -> None:
    census = BatchCensus(
        runs={BatchRunStatus.COMPLETED: 3, BatchRunStatus.RUNNING: 1},
        provider_batches={ProviderBatchStatus.RUNNING: 2},
        agents_stepping=40,
        oldest_due_at=NOW - timedelta(seconds=90),
    )
    found = samples(Metrics(), census)
    runs = {dict(labels)["status"]: v for (name, labels), v in found.items() if name == "nightshift_runs"}
    assert runs == {"created": 0, "running": 1, "completed": 3, "failed": 0, "cancelled": 0}
    batches = {
        dict(labels)["status"]: v for (name, labels), v in found.items() if name == "nightshift_provider_batches"
    }
    assert batches == {s.value: (2 if s is ProviderBatchStatus.RUNNING else 0) for s in ProviderBatchStatus}
    assert found["nightshift_agents_stepping", ()] == 40
    assert found["nightshift_poller_lag_seconds", ()] == 90


def test_no_lag_when_nothing_is_due_yet() -> None:
    soon = BatchCensus(runs={}, provider_batches={}, agents_stepping=0, oldest_due_at=NOW + timedelta(seconds=5))
    assert samples(Metrics(), soon)["nightshift_poller_lag_seconds", ()] == 0
    assert samples(Metrics())["nightshift_poller_lag_seconds", ()] == 0


def test_tokens_by_kind_and_cost_only_when_priced() -> None:
    metrics = Metrics()
    metrics.usage("anthropic", "m1", Usage(input_tokens=10, output_tokens=4, cache_read_tokens=0), 0.25)
    metrics.usage("anthropic", "m1", Usage(input_tokens=5, cache_write_tokens=7), None)
    found = samples(metrics)
    tokens = {
        dict(labels)["kind"]: v
        for (name, labels), v in found.items()
        if name == "nightshift_tokens_total" and dict(labels)["model"] == "m1"
    }
    assert tokens == {"input": 15, "output": 4, "cache_write": 7}
    assert (
        found["nightshift_cost_usd_total", (("model", "m1"), ("provider", "anthropic"), ("run_kind", "main"))] == 0.25
    )


def test_sleeptime_usage_is_counted_apart_from_the_main_runs() -> None:
    metrics = Metrics()
    metrics.usage("anthropic", "m1", Usage(output_tokens=4), 0.25)
    metrics.usage("anthropic", "m1", Usage(output_tokens=3), 0.5, run_kind=BatchRunKind.SLEEPTIME)
    found = samples(metrics)
    for run_kind, output, cost in (("main", 4, 0.25), ("sleeptime", 3, 0.5)):
        tokens = (("kind", "output"), ("model", "m1"), ("provider", "anthropic"), ("run_kind", run_kind))
        assert found["nightshift_tokens_total", tokens] == output
        assert (
            found["nightshift_cost_usd_total", (("model", "m1"), ("provider", "anthropic"), ("run_kind", run_kind))]
            == cost
        )


def test_a_child_process_figures_add_to_the_parents_series_by_series() -> None:
    parent, child = Metrics(), Metrics()
    parent.stage_done("submit", "anthropic", 0.3)
    child.stage_done("submit", "anthropic", 2.0)
    child.stage_done("apply", "openai", 0.02)  # a series only the child has
    parent.usage("anthropic", "claude", Usage(input_tokens=7), None)
    child.usage("anthropic", "claude", Usage(input_tokens=5), 0.5)
    child.sandbox_calls(3, 1)
    text = parent.exposition(EMPTY, NOW, others=[child.process_figures().decode()]).decode()
    found = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)  # parses: no family is written twice
        for s in family.samples
    }
    submit = (("provider", "anthropic"), ("stage", "submit"))
    assert found["nightshift_stage_duration_seconds_count", submit] == 2
    assert found["nightshift_stage_duration_seconds_sum", submit] == 2.3
    assert found["nightshift_stage_duration_seconds_bucket", (("le", "0.5"), *submit)] == 1
    assert found["nightshift_stage_duration_seconds_count", (("provider", "openai"), ("stage", "apply"))] == 1
    tokens = (("kind", "input"), ("model", "claude"), ("provider", "anthropic"), ("run_kind", "main"))
    assert found["nightshift_tokens_total", tokens] == 12
    assert (
        found["nightshift_cost_usd_total", (("model", "claude"), ("provider", "anthropic"), ("run_kind", "main"))]
        == 0.5
    )
    assert found["nightshift_sandbox_calls_total", ()] == 3
    assert found["nightshift_runs", (("status", "running"),)] == 0  # the cluster's figures: the parent's alone
    assert "nightshift_runs" not in child.process_figures().decode()
