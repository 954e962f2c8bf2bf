"""Model providers: the ``ModelProvider`` seam, one package per provider, and their registry.

``base`` holds the seam and its neutral types; ``registry`` the ``ProviderInfo`` of each known
provider (found by the model's prefix); each provider's package (``anthropic``, ``openai``) its
``INFO``, its ``wire`` translation (pure) and its ``client`` over the SDK; ``clients`` the
``ProviderSet`` of a process, which imports an SDK only when its provider is first used.
"""

from nightshift.domain.usage import Usage
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
