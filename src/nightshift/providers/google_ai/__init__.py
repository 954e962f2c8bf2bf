"""Google's Gemini API: ``generateContent`` and Batch Mode (``wire`` translates, ``client`` calls
the SDK, ``schema`` says which tools Gemini can be given)."""

from nightshift.providers.google_ai.schema import unsupported
from nightshift.providers.registry import ProviderInfo

INFO = ProviderInfo(
    name="google_ai",  # Letta's prefix for the Gemini API's models
    key_variable="GEMINI_API_KEY",
    base_url_variable="GEMINI_BASE_URL",
    default_base_url="https://generativelanguage.googleapis.com",
    # The API names no count; a batch is bounded by its input file's 2 GB.
    max_batch_requests=100_000,
    max_batch_bytes=2_000_000_000,
    one_model_per_batch=True,
    example_model="gemini-2.5-flash",
    cache_rates=None,  # implicit caching: no lifetime to choose, no write billed
    client="nightshift.providers.google_ai.client",
    wire="nightshift.providers.google_ai.wire",
    price_data_id="google",
    model_prefix="gemini-",
    tool_problem=unsupported,
    aliases=("gemini",),
)
