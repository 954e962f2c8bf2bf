"""A local emulator of the Anthropic, OpenAI and Gemini batch APIs, with a deterministic scripted model.

``create_app`` builds the FastAPI app (its routes are in ``routes/``, one module per API), ``serve``
runs it (``nightshift emulator``) and ``running_emulator`` runs it in a thread for tests. Knobs are
in ``EmulatorConfig``; the admin endpoints (``/_emulator/...``) change them while it runs, and
``EmulatorAdmin`` calls them.
"""

from nightshift.emulator.admin_client import EmulatorAdmin
from nightshift.emulator.app import create_app
from nightshift.emulator.config import EmulatorConfig, HttpFault, ScriptedError, ScriptedReply, ScriptedToolCall
from nightshift.emulator.server import running_emulator, serve

__all__ = [
    "EmulatorAdmin",
    "EmulatorConfig",
    "HttpFault",
    "ScriptedError",
    "ScriptedReply",
    "ScriptedToolCall",
    "create_app",
    "running_emulator",
    "serve",
]
