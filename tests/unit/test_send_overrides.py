"""What a send's ``override_model`` / ``override_system`` change of its model calls
(``runtime.sync.Overrides``), with plain values."""

from __future__ import annotations

from nightshift.domain.agents import LLMConfig
from nightshift.providers.base import ModelRequest
from nightshift.runtime.sync import NO_OVERRIDES, Overrides

AGENT = LLMConfig(
    provider="anthropic",
    model="claude-3-5-haiku-20241022",
    context_window=200_000,
    max_tokens=1234,
    temperature=0.3,
    parallel_tool_calls=False,
)


def test_no_override_leaves_the_agent_s_config_and_request() -> None:
    request = ModelRequest(model="claude-3-5-haiku-20241022", system="You are Ada.", messages=())
    assert NO_OVERRIDES.config(AGENT) is AGENT
    assert NO_OVERRIDES.request(request) is request


def test_another_model_keeps_the_agent_s_limits_within_its_own_window() -> None:
    smaller = Overrides(model="openai/gpt-4o-mini", model_window=128_000).config(AGENT)
    assert (smaller.provider, smaller.model, smaller.context_window) == ("openai", "gpt-4o-mini", 128_000)
    assert (smaller.max_tokens, smaller.temperature, smaller.parallel_tool_calls) == (1234, 0.3, False)
    # A larger (or unknown) window never grows the agent's: its window was kept for that size.
    assert Overrides(model="openai/gpt-4.1", model_window=1_000_000).config(AGENT).context_window == 200_000
    assert Overrides(model="openai/some-new-model").config(AGENT).context_window == 200_000
    # A model name with slashes of its own keeps them.
    assert Overrides(model="openai/ft:org/custom").config(AGENT).model == "ft:org/custom"


def test_another_system_prompt_replaces_only_the_system_prompt() -> None:
    request = ModelRequest(model="m", system="You are Ada.", messages=(), max_tokens=99)
    changed = Overrides(system="Answer in French.").request(request)
    assert changed.system == "Answer in French."
    assert (changed.model, changed.max_tokens) == ("m", 99)
    assert Overrides(system="").request(request).system == ""
