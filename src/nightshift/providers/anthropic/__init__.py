"""Anthropic: Messages and Message Batches (``wire`` translates, ``client`` calls the SDK)."""

from nightshift.providers.registry import Price, ProviderInfo

INFO = ProviderInfo(
    name="anthropic",
    key_variable="ANTHROPIC_API_KEY",
    base_url_variable="ANTHROPIC_BASE_URL",
    default_base_url="https://api.anthropic.com",
    max_batch_requests=100_000,
    one_model_per_batch=False,
    example_model="claude-3-5-haiku-20241022",
    # Public list prices (normal API); batches bill half.
    prices={
        "claude-3-5-haiku*": Price(input=0.80, output=4.00, cache_write=1.00, cache_read=0.08),
        "claude-3-haiku*": Price(input=0.25, output=1.25, cache_write=0.30, cache_read=0.03),
        "claude-haiku-4*": Price(input=1.00, output=5.00, cache_write=1.25, cache_read=0.10),
        "claude-3-5-sonnet*": Price(input=3.00, output=15.00, cache_write=3.75, cache_read=0.30),
        "claude-3-7-sonnet*": Price(input=3.00, output=15.00, cache_write=3.75, cache_read=0.30),
        "claude-sonnet-4*": Price(input=3.00, output=15.00, cache_write=3.75, cache_read=0.30),
        "claude-opus-4*": Price(input=15.00, output=75.00, cache_write=18.75, cache_read=1.50),
    },
    client="nightshift.providers.anthropic.client",
)
