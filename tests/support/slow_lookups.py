"""An order lookup that takes its time, and the emulator's script that calls it: a run that goes on
for a few steps while a test cuts its stream, resumes it, or kills its server."""

from __future__ import annotations

import httpx

from nightshift.emulator.config import ScriptedReply, ScriptedToolCall


def slow_lookup_source(seconds: float) -> str:
    """A custom tool's source: ``slow_lookup(order_id)``, which sleeps ``seconds``."""
    return f'''
def slow_lookup(order_id: str) -> str:
    """Look up the status of an order, slowly.

    Args:
        order_id: The order's identifier.
    """
    import time

    time.sleep({seconds})
    return f"order {{order_id}} shipped"
'''


def script_lookups(emulator: str, orders: tuple[str, ...], reply: str) -> None:
    """The emulator's next answers: one slow lookup per order (each asks for another step), then ``reply``."""
    replies = [
        ScriptedReply(tool_call=ScriptedToolCall(name="slow_lookup", arguments={"order_id": o}, request_heartbeat=True))
        for o in orders
    ]
    replies.append(ScriptedReply(tool_call=ScriptedToolCall(name="send_message", arguments={"message": reply})))
    body = {"custom_id": "*", "replies": [r.model_dump(mode="json") for r in replies]}
    httpx.post(f"{emulator}/_emulator/script", json=body).raise_for_status()
