"""The process's Prometheus metrics (``GET /metrics``): what this process did, and the batch work
of the whole cluster.

Two kinds of figures (the README's "Metrics" lists them):

* **per process**, counters and a histogram recorded as the work happens, by whatever the worker
  hands its ``Metrics`` to: stage durations, provider errors by kind, tokens and cost by provider,
  model and kind of run, sandbox calls and failures. Each process counts its own work only, so the figures of
  several processes add up: Prometheus sums them across the processes it scrapes.
* **cluster-wide**, gauges read from the shared database when scraped (``BatchCensus``): runs and
  provider batches by status, agents stepping, the poller lag. Every process reports the same
  values: take any one of them (``max``), never their sum.

``serve`` runs its poller in a child process (``nightshift poll --metrics-file``): the child writes
its per-process figures to a file after each pass, and the API process adds them to its own when
scraped (``exposition(..., others=...)``), so one target still counts all the work of one ``serve``.

A ``Metrics`` keeps its figures in a ``CollectorRegistry`` of its own, not in prometheus-client's
process-wide default one: it is built once per process (``parts.running_parts``, for ``serve`` and
``poll``) and handed to what records into it, so two apps in one process (as in the tests) never
see each other's figures, and importing this module creates nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from nightshift.domain.batch_progress import BatchCensus
from nightshift.domain.batches import BatchRunKind, BatchRunStatus, ProviderBatchStatus
from nightshift.domain.usage import Usage

# From a submit of a few agents (tens of ms) to the apply of a step of 10,000 agents with tools.
STAGE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# A provider batch's turnaround, submit to end: from a few seconds to the providers' 24-hour window.
TURNAROUND_BUCKETS = (
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1_200.0,
    1_800.0,
    3_600.0,
    7_200.0,
    14_400.0,
    43_200.0,
    86_400.0,
)
# The token counts of an item's usage, by the ``kind`` label they are counted under.
TOKEN_KINDS = {
    "input_tokens": "input",
    "output_tokens": "output",
    "cache_read_tokens": "cache_read",
    "cache_write_tokens": "cache_write",
}


# The families a process counts itself (the others are the cluster's, read from the database).
PER_PROCESS = frozenset(
    {
        "nightshift_stage_duration_seconds",
        "nightshift_provider_batch_turnaround_seconds",
        "nightshift_provider_errors",
        "nightshift_tokens",
        "nightshift_cost_usd",
        "nightshift_sandbox_calls",
        "nightshift_sandbox_failures",
        "nightshift_taken_over_requests",
    }
)


class ErrorScope(StrEnum):
    """What a provider error counted in ``nightshift_provider_errors_total`` was about."""

    CALL = "call"  # a call to the provider's API failed: submit, poll, results, cancel, a synchronous step
    REQUEST = "request"  # the provider answered one request of a batch with an error


class Metrics:
    """The figures of one process, in a registry of its own; ``exposition`` renders them."""

    def __init__(self) -> None:
        # No ``*_created`` series beside each counter: a process start time per series is noise
        # here (Prometheus sees a restart as a counter reset). A switch of the library, not a figure.
        disable_created_metrics()  # type: ignore[no-untyped-call]  # (untyped in prometheus-client)
        self.registry = CollectorRegistry()
        registry = self.registry
        self._stage_seconds = Histogram(
            "nightshift_stage_duration_seconds",
            "How long each stage of a provider batch took in this process (submit, poll: the results "
            "stored, apply: the results applied and the next step written, cancel).",
            ["stage", "provider"],
            buckets=STAGE_BUCKETS,
            registry=registry,
        )
        self._turnaround = Histogram(
            "nightshift_provider_batch_turnaround_seconds",
            "How long the provider batches this process saw end took, from their submit to the poll "
            "that saw the end (what the poll schedule follows).",
            ["provider"],
            buckets=TURNAROUND_BUCKETS,
            registry=registry,
        )
        self._provider_errors = Counter(
            "nightshift_provider_errors",
            "Provider errors this process met, by kind (rate_limit_error, overloaded_error...): a failed "
            "API call (scope=call) or a request of a batch answered with an error (scope=request).",
            ["provider", "kind", "scope"],
            registry=registry,
        )
        self._tokens = Counter(
            "nightshift_tokens",
            "Tokens of the batch requests whose results this process applied (run_kind: main, or "
            "sleeptime for sleep-time agents' runs).",
            ["provider", "model", "kind", "run_kind"],
            registry=registry,
        )
        self._cost = Counter(
            "nightshift_cost_usd",
            "Cost in USD (batch prices) of the batch requests whose results this process applied; "
            "models without a known price are not counted (run_kind: main, or sleeptime for sleep-time "
            "agents' runs).",
            ["provider", "model", "run_kind"],
            registry=registry,
        )
        self._sandbox_calls = Counter(
            "nightshift_sandbox_calls", "Custom tool calls this process ran in the tool sandbox.", registry=registry
        )
        self._sandbox_failures = Counter(
            "nightshift_sandbox_failures",
            "Custom tool calls that did not return (raised, timed out, went over a limit, could not run).",
            registry=registry,
        )
        self._taken_over = Counter(
            "nightshift_taken_over_requests",
            "Requests of provider batches this process took over for their run's deadline, sent through "
            "the normal API (route=normal) or a tier billed at batch prices (route=flex).",
            ["provider", "route"],
            registry=registry,
        )
        self._runs = Gauge(
            "nightshift_runs",
            "Batch runs of every organization by status (cluster-wide, read from the database: do not sum).",
            ["status"],
            registry=registry,
        )
        self._provider_batches = Gauge(
            "nightshift_provider_batches",
            "Provider batches of every organization by status (cluster-wide, read from the database: do not sum).",
            ["status"],
            registry=registry,
        )
        self._agents_stepping = Gauge(
            "nightshift_agents_stepping",
            "Agents in a step of a batch run not yet applied (cluster-wide, read from the database: do not sum).",
            registry=registry,
        )
        self._poller_lag = Gauge(
            "nightshift_poller_lag_seconds",
            "How long the provider batch that has been due longest has waited for a poller, 0 when none is "
            "overdue (cluster-wide, read from the database: do not sum).",
            registry=registry,
        )

    def stage_done(self, stage: str, provider: str, seconds: float) -> None:
        """Count one stage of a provider batch of ``provider`` that took ``seconds``."""
        self._stage_seconds.labels(stage=stage, provider=provider).observe(seconds)

    def batch_ended(self, provider: str, turnaround: float) -> None:
        """Count a provider batch of ``provider`` seen ended ``turnaround`` seconds after its submit."""
        self._turnaround.labels(provider=provider).observe(turnaround)

    def provider_error(self, provider: str, kind: str, scope: ErrorScope, count: int = 1) -> None:
        """Count ``count`` errors of ``kind`` from ``provider``."""
        self._provider_errors.labels(provider=provider, kind=kind, scope=scope.value).inc(count)

    def usage(
        self,
        provider: str,
        model: str,
        tokens: Usage,
        cost_usd: float | None,
        *,
        run_kind: BatchRunKind = BatchRunKind.MAIN,
    ) -> None:
        """Count the tokens (an item's ``usage``, or the sum of several) and their cost, if known;
        ``run_kind`` keeps sleep-time agents' upkeep apart from the work users asked for."""
        counted = tokens.to_json()
        for key, kind in TOKEN_KINDS.items():
            if counted[key]:
                self._tokens.labels(provider=provider, model=model, kind=kind, run_kind=run_kind.value).inc(
                    counted[key]
                )
        if cost_usd:
            self._cost.labels(provider=provider, model=model, run_kind=run_kind.value).inc(cost_usd)

    def sandbox_calls(self, calls: int, failures: int) -> None:
        """Count ``calls`` custom tool calls, ``failures`` of which did not return."""
        self._sandbox_calls.inc(calls)
        if failures:
            self._sandbox_failures.inc(failures)

    def taken_over(self, provider: str, route: str, count: int) -> None:
        """Count ``count`` requests of ``provider`` taken over for a deadline through ``route``."""
        self._taken_over.labels(provider=provider, route=route).inc(count)

    def process_figures(self) -> bytes:
        """This process's own figures (``PER_PROCESS``) in Prometheus's text format, for a parent to add."""
        return generate_latest(_Families([f for f in self.registry.collect() if f.name in PER_PROCESS]))

    def exposition(self, census: BatchCensus, now: datetime, *, others: Sequence[str] = ()) -> bytes:
        """Every figure in Prometheus's text format, the cluster's as ``census`` found it at ``now``.

        ``others``: the ``process_figures`` of child processes (the poller of ``serve``), added to
        this process's own figures sample by sample.
        """
        for run_status in BatchRunStatus:
            self._runs.labels(status=run_status.value).set(census.runs.get(run_status, 0))
        for batch_status in ProviderBatchStatus:
            self._provider_batches.labels(status=batch_status.value).set(census.provider_batches.get(batch_status, 0))
        self._agents_stepping.set(census.agents_stepping)
        due = census.oldest_due_at
        self._poller_lag.set(max(0.0, (now - due).total_seconds()) if due is not None else 0.0)
        if not others:
            return generate_latest(self.registry)
        return generate_latest(_Families(_added(list(self.registry.collect()), others)))


class _Families:
    """Metric families already collected, in the shape ``generate_latest`` reads (a registry's)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def _added(own: list[Metric], others: Sequence[str]) -> list[Metric]:
    """``own`` with the per-process samples of ``others`` (Prometheus text) added to the same series.

    Counters and histograms add up sample by sample (a histogram's buckets, count and sum alike);
    a series only another process has is appended to its family, after this process's series.
    """
    extra: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for text in others:
        for family in text_string_to_metric_families(text):
            if family.name in PER_PROCESS:
                found = extra.setdefault(family.name, {})
                for sample in family.samples:
                    key = (sample.name, tuple(sorted(sample.labels.items())))
                    found[key] = found.get(key, 0.0) + sample.value
    merged = []
    for family in own:
        adding = dict(extra.get(family.name, {}))
        if not adding:
            merged.append(family)
            continue
        total = Metric(family.name, family.documentation, family.type, family.unit)
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            total.add_sample(sample.name, sample.labels, sample.value + adding.pop(key, 0.0))
        for (name, labels), value in adding.items():
            total.add_sample(name, dict(labels), value)
        merged.append(total)
    return merged
