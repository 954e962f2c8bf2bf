"""OpenAI's batch webhooks: OpenAI sends a signed ``POST`` when a batch completes, fails, expires
or is cancelled (to the endpoint set in the project's webhook settings). The signature is checked
with the secret OpenAI gave for that endpoint (``OPENAI_WEBHOOK_SECRET``), by the SDK, as
Standard Webhooks define it: an event older than five minutes, or signed with another secret,
is refused."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

import orjson

from nightshift.errors import InvalidInput, NotFound, Unauthorized

if TYPE_CHECKING:
    from openai.resources.webhooks.webhooks import Webhooks

SECRET_VARIABLE = "OPENAI_WEBHOOK_SECRET"
# The events of a batch that has ended, one way or another.
BATCH_ENDED = frozenset({"batch.completed", "batch.failed", "batch.expired", "batch.cancelled"})


def ended_batch_id(payload: bytes, headers: Mapping[str, str]) -> str | None:
    """The id of the batch a verified event says has ended; None for an event of something else.

    Raises ``NotFound`` when no secret is set (nightshift takes no webhook then), ``Unauthorized``
    when the signature does not hold."""
    secret = os.environ.get(SECRET_VARIABLE)
    if not secret:
        raise NotFound(f"no OpenAI webhook is taken here: set {SECRET_VARIABLE} to the endpoint's secret")
    try:
        _verifier(secret).verify_signature(payload, dict(headers))
    except ValueError as exc:  # a header missing or malformed, or the signature not matching
        raise Unauthorized(f"the webhook's signature does not hold: {exc}") from None
    # Read as plain JSON, not as the SDK's event types: an event type newer than the SDK is ignored.
    try:
        event = orjson.loads(payload)
    except orjson.JSONDecodeError:
        raise InvalidInput("the webhook's body is not JSON") from None
    if not isinstance(event, dict) or event.get("type") not in BATCH_ENDED:
        return None
    data = event.get("data")
    batch_id = data.get("id") if isinstance(data, dict) else None
    return batch_id if isinstance(batch_id, str) else None


@functools.cache
def _verifier(secret: str) -> Webhooks:
    """The SDK's webhook checker for ``secret`` (no request is ever sent through its client)."""
    import openai

    return openai.OpenAI(api_key="unused", webhook_secret=secret, max_retries=0).webhooks
