"""OpenAI: Chat Completions and the Batch API (``wire`` translates, ``client`` calls the SDK)."""

from nightshift.providers.registry import Price, ProviderInfo

INFO = ProviderInfo(
    name="openai",
    key_variable="OPENAI_API_KEY",
    base_url_variable="OPENAI_BASE_URL",
    default_base_url="https://api.openai.com/v1",
    max_batch_requests=50_000,
    one_model_per_batch=True,
    example_model="gpt-4o-mini",
    # Public list prices (normal API); batches bill half. OpenAI bills cache writes as input.
    prices={
        "gpt-4o-mini*": Price(input=0.15, output=0.60, cache_write=0.15, cache_read=0.075),
        "gpt-4o*": Price(input=2.50, output=10.00, cache_write=2.50, cache_read=1.25),
        "gpt-4.1-nano*": Price(input=0.10, output=0.40, cache_write=0.10, cache_read=0.025),
        "gpt-4.1-mini*": Price(input=0.40, output=1.60, cache_write=0.40, cache_read=0.10),
        "gpt-4.1*": Price(input=2.00, output=8.00, cache_write=2.00, cache_read=0.50),
    },
    client="nightshift.providers.openai.client",
)
