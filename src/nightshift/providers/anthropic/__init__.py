"""Anthropic: Messages and Message Batches (``wire`` translates, ``client`` calls the SDK)."""

from nightshift.domain.caching import ANTHROPIC_RATES
from nightshift.providers.registry import ProviderInfo

INFO = ProviderInfo(
    name="anthropic",
    key_variable="ANTHROPIC_API_KEY",
    base_url_variable="ANTHROPIC_BASE_URL",
    default_base_url="https://api.anthropic.com",
    max_batch_requests=100_000,
    # Of the request body that creates the batch: "256 MB", read as the smaller 256,000,000.
    max_batch_bytes=256_000_000,
    one_model_per_batch=False,
    example_model="claude-3-5-haiku-20241022",
    cache_rates=ANTHROPIC_RATES,
    client="nightshift.providers.anthropic.client",
    wire="nightshift.providers.anthropic.wire",
    counts_progress=False,  # every request counts as processing until the whole batch ends
)
