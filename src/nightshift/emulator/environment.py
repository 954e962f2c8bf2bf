"""Where each provider's SDK finds the emulator: the variables that point every SDK at it.

The emulator serves each API under the path its SDK appends to the base URL it is given:
Anthropic's and Gemini's SDKs add their version (``/v1/messages``, ``/v1beta/models``) to the
root, OpenAI's expects the base URL to end in ``/v1``. The variables are nightshift's provider
registry's (the emulator imports nothing of the server; a test holds the two together).
"""

from __future__ import annotations

from typing import Final

# Each provider's (base URL variable, API key variable, path under the emulator's root).
_PROVIDERS: Final = (
    ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", ""),
    ("OPENAI_BASE_URL", "OPENAI_API_KEY", "/v1"),
    ("GEMINI_BASE_URL", "GEMINI_API_KEY", ""),
)


def sdk_environment(url: str, *, api_key: str = "emulator") -> dict[str, str]:
    """The base URL and API key variables of every provider's SDK, pointing at the emulator at ``url``.

    The emulator takes any key unless started with one (``EmulatorConfig.api_key``).
    """
    root = url.rstrip("/")
    variables: dict[str, str] = {}
    for base_url, key, path in _PROVIDERS:
        variables[base_url] = root + path
        variables[key] = api_key
    return variables
