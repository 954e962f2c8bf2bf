"""Submitting ``ModelRequest`` objects as one provider batch, as the batch stages do with the entries they encode."""

from __future__ import annotations

from collections.abc import Mapping

from nightshift.providers.base import BatchProvider, ModelRequest


async def submit_requests(
    provider: BatchProvider, requests: Mapping[str, ModelRequest], *, tag: str, max_bytes: int | None = None
) -> str:
    """Encode ``requests`` for ``provider`` and submit them as one batch (of their one model, or of several)."""
    models = {request.model for request in requests.values()}
    entries = {custom_id: provider.encode_request(custom_id, request) for custom_id, request in requests.items()}
    model = models.pop() if len(models) == 1 else None
    return await provider.submit_batch(entries, model=model, tag=tag, max_bytes=max_bytes)
