"""Counting a request's tokens before it is sent, the way each provider counts them (near enough).

OpenAI's tokenizer is public: its text is counted with tiktoken (the provider's ``encoding``).
Anthropic's is not: its tokens are estimated from the characters, at ``CHARS_PER_TOKEN``, a little
fewer characters per token than Claude's tokenizer takes for English prose, so the estimate errs
high. Each message adds ``MESSAGE_OVERHEAD`` for its role and wrapping, each tool call
``CALL_OVERHEAD`` and each image ``IMAGE_TOKENS`` (about what both providers charge for an image
of the size they scale to).

These are estimates for what was added to a window since the provider last counted it (an agent's
``context_tokens`` starts from the provider's exact count of its last request); nothing here counts
a whole history on the hot path.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any, Protocol

from nightshift.domain.messages import Message
from nightshift.providers.registry import provider_info

CHARS_PER_TOKEN = 3.5
MESSAGE_OVERHEAD = 8
CALL_OVERHEAD = 12
IMAGE_TOKENS = 1_600


class TextCounter(Protocol):
    def __call__(self, text: str, /) -> int: ...


def _by_characters(text: str) -> int:
    return int(len(text) / CHARS_PER_TOKEN) + 1 if text else 0


@cache
def text_counter(provider: str) -> TextCounter:
    """How ``provider``'s tokens of a text are counted (loads its tiktoken encoding once)."""
    encoding_name = provider_info(provider).encoding
    if encoding_name is None:
        return _by_characters
    import tiktoken  # imported on first use: loading an encoding is slow, and many processes count none

    encoding = tiktoken.get_encoding(encoding_name)

    def count(text: str) -> int:
        return len(encoding.encode_ordinary(text)) if text else 0

    return count


def message_tokens(provider: str, message: Message) -> int:
    """The tokens ``message`` adds to a request to ``provider``."""
    count = text_counter(provider)
    tokens = MESSAGE_OVERHEAD + count(message.text) + IMAGE_TOKENS * len(message.images)
    if message.reasoning:
        tokens += count(message.reasoning)
    for call in message.tool_calls:
        tokens += CALL_OVERHEAD + count(call.name) + count(call.arguments)
    return tokens


def messages_tokens(provider: str, messages: Iterable[Message]) -> int:
    """The tokens of several messages (see ``message_tokens``)."""
    return sum(message_tokens(provider, m) for m in messages)


def tools_tokens(provider: str, schemas: Iterable[Mapping[str, Any]]) -> int:
    """The tokens of the tool definitions of a request, as their JSON."""
    count = text_counter(provider)
    return sum(CALL_OVERHEAD + count(json.dumps(schema)) for schema in schemas)
