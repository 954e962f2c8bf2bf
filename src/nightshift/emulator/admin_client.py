"""``EmulatorAdmin``: the admin endpoints of a running emulator, for tests and demos (async).

Usage::

    async with EmulatorAdmin(base_url) as admin:
        await admin.configure(polls_to_end=2)
        await admin.script("agent-1", ScriptedReply(text="hi"))
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import httpx
from pydantic_core import to_jsonable_python

from nightshift.emulator.config import EmulatorConfig, HttpFault, ScriptedReply


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The certificate check of every admin client of this process, built once: httpx would read
    the CA bundle again for each client, and a test suite builds one per test."""
    return httpx.create_ssl_context()


class EmulatorAdmin:
    """A small async client of ``/_emulator/``. Close it (or use ``async with``)."""

    def __init__(self, base_url: str) -> None:
        self._http = httpx.AsyncClient(base_url=base_url.rstrip("/") + "/_emulator", timeout=30, verify=_tls_context())

    async def configure(self, **fields: Any) -> EmulatorConfig:
        """Replace the given config fields (see ``EmulatorConfig``); returns the whole config."""
        return EmulatorConfig.model_validate(await self._post("/config", to_jsonable_python(fields)))

    async def script(self, custom_id: str, *replies: ScriptedReply) -> None:
        """Queue exact replies for a custom_id (``"*"``: normal, non-batch calls)."""
        body = {"custom_id": custom_id, "replies": [r.model_dump(mode="json") for r in replies]}
        await self._post("/script", body)

    async def fault(self, *faults: HttpFault) -> None:
        """Queue HTTP faults."""
        await self._post("/faults", {"faults": [f.model_dump(mode="json") for f in faults]})

    async def requests(self, *, path: str | None = None, method: str | None = None) -> list[dict[str, Any]]:
        """The API requests the emulator received, oldest first."""
        params = {k: v for k, v in {"path": path, "method": method}.items() if v is not None}
        response = await self._http.get("/requests", params=params)
        response.raise_for_status()
        data: list[dict[str, Any]] = response.json()["data"]
        return data

    async def model_calls(
        self, *, custom_id: str | None = None, batch_id: str | None = None, api: str | None = None
    ) -> list[dict[str, Any]]:
        """What the scripted model was asked (``body`` is the request it saw), oldest first."""
        params = {k: v for k, v in {"custom_id": custom_id, "batch_id": batch_id, "api": api}.items() if v}
        response = await self._http.get("/model_calls", params=params)
        response.raise_for_status()
        data: list[dict[str, Any]] = response.json()["data"]
        return data

    async def advance(self, seconds: float) -> float:
        """Let ``seconds`` pass at once for the batches and the prompt cache; returns the emulator's time."""
        return float((await self._post("/clock", {"advance": seconds}))["now"])

    async def reset(self) -> None:
        """Back to the starting config; forget batches, files, logs, scripts and the prompt cache."""
        await self._post("/reset", {})

    async def _post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        response = await self._http.post(path, json=body)
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> EmulatorAdmin:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
