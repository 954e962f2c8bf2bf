"""A sandbox whose calls are counted in the process's metrics."""

from __future__ import annotations

from collections.abc import Sequence

from nightshift.metrics import Metrics
from nightshift.tools.results import SandboxCall, SandboxResult
from nightshift.tools.sandbox import Sandbox


class MeteredSandbox:
    """A :class:`~nightshift.tools.sandbox.Sandbox` that counts the calls it runs, and those that
    did not return, in ``metrics`` (``nightshift_sandbox_calls_total``, ``..._failures_total``)."""

    def __init__(self, inner: Sandbox, metrics: Metrics) -> None:
        self._inner = inner
        self._metrics = metrics

    async def run(self, call: SandboxCall, *, timeout: float | None = None) -> SandboxResult:  # noqa: ASYNC109
        result = await self._inner.run(call, timeout=timeout)
        self._metrics.sandbox_calls(1, 0 if result.ok else 1)
        return result

    async def run_many(
        self,
        calls: Sequence[SandboxCall],
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> list[SandboxResult]:
        results = await self._inner.run_many(calls, timeout=timeout)
        self._metrics.sandbox_calls(len(results), sum(not r.ok for r in results))
        return results

    async def aclose(self) -> None:
        await self._inner.aclose()
