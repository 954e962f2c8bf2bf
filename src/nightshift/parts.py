"""The parts of a server or poller process, built once and closed together.

A process (``serve``, ``nightshift poll``, the bench) builds its database engine itself, then
these around it: the provider clients, the tool sandbox, the price table, its metrics and the
clock. Each layer is handed the few parts it uses (the API's routers get the providers or the
sandbox, the batch worker gets what a stage needs), never this object to reach into.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from nightshift.clock import SYSTEM_CLOCK, Clock
from nightshift.collector import rare_full_collections
from nightshift.config import Settings
from nightshift.metrics import Metrics
from nightshift.pricing import PriceTable
from nightshift.providers.base import ModelProvider
from nightshift.providers.clients import ProviderSet
from nightshift.providers.registry import parse_model
from nightshift.tools.metered import MeteredSandbox
from nightshift.tools.sandbox import Sandbox, build_sandbox


@dataclass(frozen=True, slots=True, kw_only=True)
class Parts:
    """What one process builds at startup and shares: settings read once, clients opened once."""

    settings: Settings
    engine: AsyncEngine
    providers: ProviderSet
    # The tool sandbox, counting its calls in ``metrics``.
    sandbox: Sandbox
    prices: PriceTable
    # What this process did (stage durations, provider errors, tokens and cost), for ``GET /metrics``.
    metrics: Metrics
    clock: Clock


def checked_summary_model(handle: str | None) -> str | None:
    """``NIGHTSHIFT_SUMMARY_MODEL`` as given, once its provider is known to exist.

    Raises:
        InvalidInput: Not ``provider/model-name``, or an unknown provider.
    """
    if handle is not None:
        parse_model(handle)
    return handle


@asynccontextmanager
async def running_parts(
    settings: Settings,
    engine: AsyncEngine,
    *,
    clock: Clock = SYSTEM_CLOCK,
    providers: Mapping[str, ModelProvider] | None = None,
) -> AsyncIterator[Parts]:
    """The process's parts around ``engine``: the sandbox and provider clients are closed when
    the block ends. A bad summary model is refused here, at startup, not at the first step.

    ``providers`` replaces the real provider of some names (``ProviderSet``'s ``overrides``: a
    scripted one, in tests).
    """
    checked_summary_model(settings.summary_model)
    metrics = Metrics()
    with rare_full_collections():
        async with (
            build_sandbox(settings) as sandbox,
            ProviderSet(metrics=metrics, overrides=providers) as provider_set,
        ):
            yield Parts(
                settings=settings,
                engine=engine,
                providers=provider_set,
                sandbox=MeteredSandbox(sandbox, metrics),
                prices=PriceTable(settings.prices),
                metrics=metrics,
                clock=clock,
            )
