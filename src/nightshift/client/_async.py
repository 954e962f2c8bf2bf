"""``AsyncClient``: the asynchronous client, sending the requests ``_calls`` describes over httpx.

The same resources and methods as ``Client``; listings are iterated with ``async for``.
"""

from __future__ import annotations

import asyncio
import builtins
import random
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from os import PathLike
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx

from nightshift.client import _calls
from nightshift.client._calls import DEFAULT_PAGE, Order, Pages, next_look
from nightshift.client._files import read_requests_file
from nightshift.client._http import (
    Call,
    api_key_of,
    base_url_of,
    headers_of,
    may_speak_tls,
    read_answer,
    speaks_tls,
    status_delay,
    tls_context,
    transport_delay,
    transport_error,
)
from nightshift.client.requests_file import with_agent_ids
from nightshift.client.types import (
    AgentResult,
    AgentRun,
    ApiKey,
    ApiKeyCreated,
    BatchRequest,
    BatchRun,
    BatchRunAgent,
    BatchRunCosts,
    BatchTurnarounds,
    RunMessage,
    RunStep,
    RunUsage,
)

T = TypeVar("T")


class AsyncClient:
    """The nightshift API over HTTP: batch runs, Letta's runs and API keys.

    Args:
        base_url: The server's URL; by default ``NIGHTSHIFT_SERVER``, else ``http://127.0.0.1:8283``.
        api_key: An API key or the server password, sent as ``Authorization: Bearer``; by default
            ``NIGHTSHIFT_API_KEY``.
        timeout: Seconds to wait for each answer.
        max_retries: Further tries of a request that could not connect, whose connection broke (when
            it is safe to send again), or that was answered 429 or 503 (after its Retry-After).
        transport: An httpx transport to send through (a proxy's, or a test's).

    Raises:
        ValueError: ``base_url`` is not an http(s) URL.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        max_retries: int = 3,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url_of(base_url)
        self.api_key = api_key_of(api_key)
        self.timeout = timeout
        self.max_retries = max_retries
        self._rng = random.Random()
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers_of(self.api_key),
            timeout=timeout,
            transport=transport,
            verify=tls_context(),
        )
        self.batches = AsyncBatches(self)
        self.runs = AsyncRuns(self)
        self.keys = AsyncKeys(self)
        self.sleeptime = AsyncSleeptime(self)

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        retry_sent: bool | None = None,
    ) -> Any:
        """Send any request of the API and return its JSON answer, with the client's retries and errors.

        ``retry_sent`` defaults to true for GET, PUT, PATCH and DELETE (safe to send again), false for POST.
        """
        again = method.upper() != "POST" if retry_sent is None else retry_sent
        call: Call[Any] = Call(
            method=method.upper(),
            path=path,
            params=dict(params or {}),
            json=json,
            read=lambda body: body,
            retry_sent=again,
        )
        return await self.send(call)

    async def send(self, call: Call[T]) -> T:
        """Send ``call``, trying again as the retry policy says, and read its answer.

        Raises:
            APIError: (by status) the server answered with an error status.
            ConnectionFailed: no connection, or it broke, after the retries.
            Timeout: the server did not answer within ``timeout``.
        """
        attempt = 0
        while True:
            try:
                response = await self._http.request(
                    call.method, call.path, params=call.query(), json=call.json, headers=dict(call.headers)
                )
            except httpx.TransportError as error:
                delay = transport_delay(error, call, attempt, self._rng) if attempt < self.max_retries else None
                if delay is None:
                    tls = may_speak_tls(self.base_url, error) and await asyncio.to_thread(speaks_tls, self.base_url)
                    raise transport_error(self.base_url, error, self.timeout, speaks_tls=tls) from None
            else:
                delay = status_delay(response, attempt, self._rng) if attempt < self.max_retries else None
                if delay is None:
                    return read_answer(call, response, self.base_url)
            await asyncio.sleep(delay)
            attempt += 1

    async def pages(self, pages: Pages[T]) -> AsyncIterator[T]:
        """Every item of a listing, page after page, each once."""
        cursor: str | None = None
        while True:
            page = await self.send(pages.call(cursor))
            for item in page:
                yield item
            cursor = pages.next_cursor(page)
            if cursor is None:
                return

    async def close(self) -> None:
        """Close the connections."""
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


class AsyncBatches:
    """``/v1/messages/batches``: batch runs."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def create(
        self,
        requests: Iterable[BatchRequest | Mapping[str, Any]],
        *,
        metadata: Mapping[str, Any] | None = None,
        name: str | None = None,
        callback_url: str | None = None,
        idempotency_key: str | None = None,
        deadline: datetime | None = None,
        finish_within_seconds: float | None = None,
    ) -> BatchRun:
        """Start a batch run: each agent gets its messages and is stepped until it stops.

        Args:
            requests: One per agent: dicts in the API's shape, or ``BatchRequest``.
            metadata: Kept on the run.
            name: Kept as ``metadata["name"]``.
            callback_url: POSTed the run when it ends.
            idempotency_key: Makes the create safe to send again (one is made when not given,
                and kept across this call's retries).
            deadline: When the run is to be done by (an aware datetime): the requests a step's
                batch has not answered in time go through the normal API.
            finish_within_seconds: The deadline as seconds from now (not with ``deadline``).
        """
        call = _calls.create_batch(
            requests,
            metadata=metadata,
            name=name,
            callback_url=callback_url,
            idempotency_key=idempotency_key,
            deadline=deadline,
            finish_within_seconds=finish_within_seconds,
        )
        return await self._client.send(call)

    async def create_from_file(
        self,
        path: str | PathLike[str],
        *,
        metadata: Mapping[str, Any] | None = None,
        name: str | None = None,
        callback_url: str | None = None,
        idempotency_key: str | None = None,
        deadline: datetime | None = None,
        finish_within_seconds: float | None = None,
    ) -> BatchRun:
        """Start a batch run from a JSON Lines file (one request per line; ``agent_name`` may
        stand in for ``agent_id`` and is looked up). Arguments as for :meth:`create`.

        Raises:
            InvalidRequestsFile: the file cannot be read, or a line is wrong (its number is given).
        """
        where, lines = read_requests_file(path)
        names = sorted({line.agent_name for line in lines if line.agent_name is not None})
        ids = {agent_name: await self._client.send(_calls.agents_named(agent_name)) for agent_name in names}
        requests = with_agent_ids(where, lines, ids)
        return await self.create(
            requests,
            metadata=metadata,
            name=name,
            callback_url=callback_url,
            idempotency_key=idempotency_key,
            deadline=deadline,
            finish_within_seconds=finish_within_seconds,
        )

    async def retrieve(self, run_id: str) -> BatchRun:
        """The run with its progress."""
        return await self._client.send(_calls.retrieve_batch(run_id))

    async def costs(self) -> BatchRunCosts:
        """The organization's batch runs by kind (main, sleeptime), all told: runs, agents, steps,
        tokens and costs, with what the normal API would have charged for the same tokens."""
        return await self._client.send(_calls.batch_costs())

    async def turnaround(self) -> BatchTurnarounds:
        """How long the organization's latest provider batches took, submit to end, by provider."""
        return await self._client.send(_calls.batch_turnaround())

    def list(
        self,
        *,
        status: str | Sequence[str] | None = None,
        has_failures: bool | None = None,
        kind: str | None = None,
        order: Order = "desc",
        limit: int = DEFAULT_PAGE,
    ) -> AsyncIterator[BatchRun]:
        """Every run (newest first by default), fetched ``limit`` at a time.

        Args:
            status: Only runs with this status (or one of these).
            has_failures: True: only runs that failed or in which some agent failed; False: the others.
            kind: ``main``: only the runs users asked for; ``sleeptime``: only sleep-time agents' runs.
            order: ``asc`` (oldest first) or ``desc``.
            limit: The page size (1 to 1000).
        """
        return self._client.pages(
            _calls.list_batches(status=status, has_failures=has_failures, kind=kind, order=order, limit=limit)
        )

    async def cancel(self, run_id: str) -> BatchRun:
        """Cancel a run: no further steps; a run that has ended is left as it is."""
        return await self._client.send(_calls.cancel_batch(run_id))

    def agents(self, run_id: str, *, limit: int = DEFAULT_PAGE) -> AsyncIterator[BatchRunAgent]:
        """Every agent of the run (by agent id): state, steps, tokens, costs and last error."""
        return self._client.pages(_calls.batch_agents(run_id, limit=limit))

    def messages(
        self, run_id: str, *, agent_id: str | None = None, order: Order = "asc", limit: int = DEFAULT_PAGE
    ) -> AsyncIterator[RunMessage]:
        """Every message of the run (of one agent with ``agent_id``), oldest first by default."""
        return self._client.pages(_calls.batch_messages(run_id, agent_id=agent_id, order=order, limit=limit))

    async def wait(
        self,
        run_id: str,
        *,
        poll_interval: float = 2.0,
        timeout: float | None = None,  # noqa: ASYNC109 (the sync client's signature: a deadline of the whole wait)
        on_progress: Callable[[BatchRun], object] | None = None,
    ) -> BatchRun:
        """Look at the run every ``poll_interval`` seconds until it has ended, and return it.

        Args:
            run_id: The run.
            poll_interval: The longest pause between looks (the first ones are shorter).
            timeout: Give up after this many seconds (the run goes on).
            on_progress: Called with the run after each look, the last one too.

        Raises:
            Timeout: ``timeout`` passed before the run ended.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        looks = 0
        while True:
            run = await self.retrieve(run_id)
            if on_progress is not None:
                on_progress(run)
            pause = next_look(run, deadline, looks, poll_interval=poll_interval, timeout=timeout)
            if pause is None:
                return run
            await asyncio.sleep(pause)
            looks += 1

    async def results(self, run_id: str) -> builtins.list[AgentResult]:
        """Per agent of the run: its replies (``final_message`` the last), state, tokens and cost."""
        agents = [agent async for agent in self.agents(run_id, limit=1000)]
        messages = [message async for message in self.messages(run_id, order="asc", limit=1000)]
        return _calls.results(agents, messages)


class AsyncSleeptime:
    """``/v1/sleeptime``: stepping the organization's sleep-time agents now."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def run(self, *, all: bool = False) -> builtins.list[BatchRun]:
        """Step the due sleep-time agents now, rather than when the poller next gathers them;
        ``all``: every one whose main agent said anything since its last run. Returns the runs
        queued (kind ``sleeptime``), none when nothing is due."""
        return await self._client.send(_calls.run_sleeptime(everything=all))


class AsyncRuns:
    """``/v1/runs``: Letta's runs (a send to one agent, or a batch run)."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    def list(
        self,
        *,
        agent_id: str | None = None,
        statuses: Sequence[str] | None = None,
        background: bool | None = None,
        active: bool = False,
        stop_reason: str | None = None,
        order: Order = "desc",
        limit: int = DEFAULT_PAGE,
    ) -> AsyncIterator[AgentRun]:
        """Every run matching the filters (newest first by default), fetched ``limit`` at a time."""
        pages = _calls.list_runs(
            agent_id=agent_id,
            statuses=statuses,
            background=background,
            active=active,
            stop_reason=stop_reason,
            order=order,
            limit=limit,
        )
        return self._client.pages(pages)

    async def retrieve(self, run_id: str) -> AgentRun:
        return await self._client.send(_calls.retrieve_run(run_id))

    def messages(
        self, run_id: str, *, order: Order = "asc", limit: int = DEFAULT_PAGE
    ) -> AsyncIterator[dict[str, Any]]:
        """Letta's messages of the run, as dicts (each has its ``message_type``)."""
        return self._client.pages(_calls.run_messages(run_id, order=order, limit=limit))

    def steps(self, run_id: str, *, order: Order = "asc", limit: int = DEFAULT_PAGE) -> AsyncIterator[RunStep]:
        return self._client.pages(_calls.run_steps(run_id, order=order, limit=limit))

    async def usage(self, run_id: str) -> RunUsage:
        return await self._client.send(_calls.run_usage(run_id))


class AsyncKeys:
    """``/v1/keys``: the organization's API keys (an admin key or the server password is needed)."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def create(self, *, name: str | None = None, is_admin: bool = False) -> ApiKeyCreated:
        """A new key; its secret (``key``) is shown this once."""
        return await self._client.send(_calls.create_key(name=name, is_admin=is_admin))

    async def list(self) -> builtins.list[ApiKey]:
        """Every key of the organization, revoked ones too (never their secrets)."""
        return await self._client.send(_calls.list_keys())

    async def revoke(self, key_id: str) -> ApiKey:
        return await self._client.send(_calls.revoke_key(key_id))


__all__ = ["AsyncBatches", "AsyncClient", "AsyncKeys", "AsyncRuns", "AsyncSleeptime"]
