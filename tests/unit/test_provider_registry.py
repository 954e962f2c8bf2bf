"""The provider registry: one ``ProviderInfo`` per provider, found by the model's prefix."""

from __future__ import annotations

import pytest

from nightshift.domain.caching import ANTHROPIC_RATES
from nightshift.emulator.environment import sdk_environment
from nightshift.errors import InvalidInput, ProviderError
from nightshift.providers.clients import ProviderSet
from nightshift.providers.registry import parse_model, provider_info, providers


def test_a_model_handle_names_its_provider() -> None:
    info, model = parse_model("openai/gpt-4o-mini")

    assert (info.name, model) == ("openai", "gpt-4o-mini")
    assert info is provider_info("openai")
    assert [p.name for p in providers()] == ["anthropic", "openai", "google_ai"]
    assert parse_model("google_ai/gemini-2.5-flash")[0] is provider_info("google_ai")


@pytest.mark.parametrize(
    ("handle", "message"),
    [
        ("mistral/large", "unknown provider 'mistral'; use one of: anthropic, openai, google_ai"),
        ("claude-3-5-haiku", "model must be 'provider/model-name' (e.g. anthropic/claude-3-5-haiku-20241022)"),
        ("anthropic/", "model must be 'provider/model-name'"),
    ],
)
def test_an_unknown_or_malformed_handle_says_what_is_known(handle: str, message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_model(handle)

    assert caught.value.message.startswith(message)
    assert caught.value.field == "model"


async def test_a_provider_builtrefuses_an_unknown_provider_by_name() -> None:
    async with ProviderSet() as built:
        with pytest.raises(ProviderError, match="unknown provider 'mistral'; use one of: anthropic, openai, google_ai"):
            built.get("mistral")


def test_each_provider_owns_its_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    anthropic, openai = provider_info("anthropic"), provider_info("openai")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:8765/")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    assert anthropic.endpoint() == "http://127.0.0.1:8765"
    assert openai.endpoint() == "https://api.openai.com/v1"
    assert (anthropic.max_batch_requests, openai.max_batch_requests) == (100_000, 50_000)
    assert (anthropic.one_model_per_batch, openai.one_model_per_batch) == (False, True)
    # Anthropic's cache is written where a request marks it, by lifetime; OpenAI's on its own.
    assert (anthropic.cache_rates, openai.cache_rates) == (ANTHROPIC_RATES, None)
    with pytest.raises(ProviderError, match="OPENAI_API_KEY is not set: export it to call openai"):
        openai.api_key()


def test_gemini_is_google_ai_in_handles_and_google_in_the_price_data(monkeypatch: pytest.MonkeyPatch) -> None:
    gemini = provider_info("gemini")  # the alias people use
    monkeypatch.delenv("GEMINI_BASE_URL", raising=False)

    assert gemini is provider_info("google_ai")
    assert parse_model("gemini/gemini-2.5-flash") == (gemini, "gemini-2.5-flash")
    assert gemini.endpoint() == "https://generativelanguage.googleapis.com"
    assert (gemini.key_variable, gemini.one_model_per_batch, gemini.cache_rates) == ("GEMINI_API_KEY", True, None)
    assert (gemini.price_id, provider_info("openai").price_id) == ("google", "openai")
    assert gemini.tool_problem is not None and provider_info("anthropic").tool_problem is None
    assert gemini.tool_problem({"type": "object", "properties": {"n": {"enum": [1, 2]}}}) is not None


def test_the_emulator_points_every_providers_variables_at_itself() -> None:
    variables = sdk_environment("http://127.0.0.1:9/", api_key="k")

    named = {name for info in providers() for name in (info.base_url_variable, info.key_variable)}
    assert set(variables) == named
    assert {variables[info.key_variable] for info in providers()} == {"k"}
    assert all(variables[info.base_url_variable].startswith("http://127.0.0.1:9") for info in providers())
