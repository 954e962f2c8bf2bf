"""Model providers: the ``ModelProvider`` seam, wire translation per provider, SDK client wiring.

``base`` holds the seam and its neutral types; ``anthropic_wire`` / ``openai_wire`` translate
(pure); ``anthropic_provider`` / ``openai_provider`` call the SDKs; ``clients`` builds them from the
environment
(imported from there, so that importing the types does not load the SDKs).
"""

from nightshift.providers.base import (
    BatchCounts,
    BatchOutcome,
    BatchState,
    BatchStatus,
    ModelError,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    OutcomeStatus,
    Usage,
)

__all__ = [
    "BatchCounts",
    "BatchOutcome",
    "BatchState",
    "BatchStatus",
    "ModelError",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "OutcomeStatus",
    "Usage",
]
