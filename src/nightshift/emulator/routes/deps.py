"""The state a route works on: the one of the app that received the request.

The routers are module-level and included in every app ``create_app`` builds, so no route holds a
state of its own: several emulators in one process (tests start some) each keep theirs.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from nightshift.emulator.state import EmulatorState


async def emulator_state(request: Request) -> EmulatorState:
    """The state of the app serving the request (``app.state.emulator``, set by ``create_app``).

    Async so that FastAPI calls it on the event loop, which owns the state, not in a thread.
    """
    state: EmulatorState = request.app.state.emulator
    return state


State = Annotated[EmulatorState, Depends(emulator_state)]
