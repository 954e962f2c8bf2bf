"""The emulated batch state machine and the emulated prompt cache."""

from __future__ import annotations

from typing import Any

from nightshift.emulator.anthropic_api import segments
from nightshift.emulator.batches import BatchJob, EndKind, Phase, RequestResult, Timing
from nightshift.emulator.tokens import PromptCache, Segment, count_tokens

DAY = 86_400.0


def job(total: int = 10, **timing: Any) -> BatchJob:
    results = [RequestResult(ok=i % 5 != 0, body={}) for i in range(total)]
    return BatchJob(
        id="b",
        created_at=0.0,
        timing=Timing(expires_at=DAY, **timing),
        custom_ids=[f"r{i}" for i in range(total)],
        results=results,
    )


def phase(batch: BatchJob) -> Phase:
    return batch.phase  # read through a call: mypy would keep an earlier narrowing


def test_ends_at_first_poll_by_default() -> None:
    batch = job()
    batch.refresh(0.0, poll=False)
    assert phase(batch) is Phase.ENDED  # nothing to wait for: even a list sees it ended
    assert batch.end_kind is EndKind.COMPLETED and batch.processed == 10
    assert batch.succeeded_count(10) == 8


def test_ends_after_n_polls() -> None:
    batch = job(polls_to_end=2)
    batch.refresh(0.0, poll=True)
    batch.refresh(0.0, poll=True)
    assert phase(batch) is Phase.RUNNING
    assert batch.done_count(0.0) == 6  # two thirds of the way
    batch.refresh(0.0, poll=True)
    assert phase(batch) is Phase.ENDED


def test_ends_after_n_seconds() -> None:
    batch = job(seconds_to_end=10.0)
    batch.refresh(5.0, poll=True)
    assert phase(batch) is Phase.RUNNING and batch.done_count(5.0) == 5
    batch.refresh(10.0, poll=True)
    assert phase(batch) is Phase.ENDED


def test_finalizing_polls_before_completion() -> None:
    batch = job(finalizing_polls=1)
    batch.refresh(0.0, poll=True)
    assert phase(batch) is Phase.RUNNING and batch.finalizing
    batch.refresh(0.0, poll=True)
    assert batch.end_kind is EndKind.COMPLETED


def test_expiry_keeps_processed_requests() -> None:
    batch = job(polls_to_end=4, expire_after_polls=1)
    batch.refresh(0.0, poll=True)
    assert phase(batch) is Phase.RUNNING
    batch.refresh(0.0, poll=True)
    assert batch.end_kind is EndKind.EXPIRED
    assert batch.processed == 4  # 2 polls of 5


def test_expiry_by_time() -> None:
    batch = job(seconds_to_end=2 * DAY)
    batch.refresh(DAY, poll=True)
    assert batch.end_kind is EndKind.EXPIRED and batch.processed == 5


def test_slow_cancel() -> None:
    batch = job(polls_to_end=9, cancel_polls=2)
    batch.refresh(0.0, poll=True)
    batch.cancel(0.0)
    assert phase(batch) is Phase.CANCELING and batch.processed == 1
    batch.refresh(0.0, poll=True)
    batch.refresh(0.0, poll=True)
    assert phase(batch) is Phase.CANCELING
    batch.refresh(0.0, poll=True)
    assert batch.end_kind is EndKind.CANCELED and batch.processed == 1


def test_cancel_of_an_ended_batch_changes_nothing() -> None:
    batch = job()
    batch.refresh(0.0, poll=True)
    batch.cancel(1.0)
    assert batch.end_kind is EndKind.COMPLETED


def test_refused_batch_fails_at_first_poll() -> None:
    batch = job()
    batch.failure = [{"code": "x"}]
    batch.refresh(0.0, poll=False)
    assert phase(batch) is Phase.RUNNING
    batch.refresh(0.0, poll=True)
    assert batch.end_kind is EndKind.FAILED and batch.processed == 0


def test_cache_writes_first_then_reads() -> None:
    cache = PromptCache()
    prompt = [Segment(text="tools" * 100, breakpoint=True), Segment(text="system" * 100, breakpoint=True)]
    first = cache.account("m", [*prompt, Segment(text="hello")], now=0.0)
    second = cache.account("m", [*prompt, Segment(text="other")], now=0.0)

    prefix = count_tokens("tools" * 100) + count_tokens("system" * 100)
    assert (first.cache_write_tokens, first.cache_read_tokens) == (prefix, 0)
    assert (second.cache_write_tokens, second.cache_read_tokens) == (0, prefix)
    assert first.input_tokens == second.input_tokens == count_tokens("hello")


def test_cache_reads_the_tools_when_the_system_changed() -> None:
    cache = PromptCache()
    tools = Segment(text="tools" * 100, breakpoint=True)
    cache.account("m", [tools, Segment(text="old system", breakpoint=True)], now=0.0)
    usage = cache.account("m", [tools, Segment(text="new system", breakpoint=True)], now=0.0)

    assert usage.cache_read_tokens == count_tokens("tools" * 100)
    assert usage.cache_write_tokens == count_tokens("new system")


def test_cache_writes_count_under_the_lifetime_of_their_breakpoint() -> None:
    cache = PromptCache()
    tools = Segment(text="tools" * 100, breakpoint=True, ttl="1h")
    system = Segment(text="system" * 100, breakpoint=True, ttl="5m")
    first = cache.account("m", [tools, system], now=0.0)
    assert first.cache_write_1h_tokens == count_tokens("tools" * 100)
    assert first.cache_write_5m_tokens == count_tokens("system" * 100)
    # The tools are read back; only the new system prompt is written, for five minutes.
    second = cache.account("m", [tools, Segment(text="new system", breakpoint=True, ttl="5m")], now=0.0)
    assert (second.cache_write_5m_tokens, second.cache_write_1h_tokens) == (count_tokens("new system"), 0)


def test_cache_min_tokens_and_models() -> None:
    cache = PromptCache()
    prompt = [Segment(text="short", breakpoint=True)]
    assert cache.account("m", prompt, min_tokens=1000, now=0.0).cache_write_tokens == 0
    cache.account("m", prompt, now=0.0)
    assert cache.account("other-model", prompt, now=0.0).cache_read_tokens == 0


def test_an_entry_is_gone_its_lifetime_after_its_last_use_and_a_read_keeps_it() -> None:
    cache = PromptCache()
    prompt = [Segment(text="system" * 100, breakpoint=True, ttl="5m")]
    cache.account("m", prompt, now=0.0)
    assert cache.account("m", prompt, now=299.0).cache_read_tokens > 0  # read: alive until 599
    assert cache.account("m", prompt, now=598.0).cache_read_tokens > 0
    assert cache.account("m", prompt, now=899.0).cache_read_tokens == 0  # five minutes unread

    hour = [Segment(text="system" * 100, breakpoint=True, ttl="1h")]
    cache.account("m", hour, now=0.0)
    assert cache.account("m", hour, now=3_000.0).cache_read_tokens > 0
    assert cache.account("m", hour, now=6_601.0).cache_read_tokens == 0


def test_a_request_reads_the_history_the_one_before_wrote() -> None:
    # The agent's next request carries its breakpoint further on: the prefix its last request
    # marked is found a few blocks before it.
    cache = PromptCache()
    system = Segment(text="system" * 100, breakpoint=True)
    turns = [Segment(text=f"turn {i} " * 50) for i in range(4)]
    cache.account("m", [system, *turns[:2], Segment(text="input", breakpoint=True)], now=0.0)
    later = cache.account(
        "m", [system, *turns[:2], Segment(text="input"), *turns[2:], Segment(text="next", breakpoint=True)], now=10.0
    )

    read = count_tokens("system" * 100) + sum(count_tokens(t.text) for t in turns[:2]) + count_tokens("input")
    assert later.cache_read_tokens == read
    assert later.cache_write_tokens == sum(count_tokens(t.text) for t in turns[2:]) + count_tokens("next")


def test_a_blocks_mark_is_not_part_of_what_is_cached() -> None:
    # The block an agent's request marked is unmarked in its next request: the same prefix.
    block = {"type": "text", "text": "where is my order?"}
    marked = {**block, "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    first = segments({"messages": [{"role": "user", "content": [marked]}]})
    later = segments({"messages": [{"role": "user", "content": [block]}]})
    assert [s.text for s in first] == [s.text for s in later]
    assert (first[0].breakpoint, first[0].ttl, later[0].breakpoint) == (True, "1h", False)


def test_held_back_requests_are_processed_last_and_not_before_their_time() -> None:
    # 10 requests, 2 held back for an hour: the other 8 are done at the first poll, the batch stays
    # open with 2 processing until the hour has passed.
    batch = job(10, held_back=2, held_back_seconds=3_600.0)
    batch.refresh(1.0, poll=True)
    assert phase(batch) is Phase.RUNNING and batch.done_count(1.0) == 8
    batch.refresh(3_600.0, poll=True)
    assert batch.end_kind is EndKind.COMPLETED and batch.processed == 10


def test_held_back_requests_a_batch_expires_with_are_expired() -> None:
    batch = job(10, held_back=3, held_back_seconds=2 * DAY)
    batch.refresh(DAY, poll=True)
    assert batch.end_kind is EndKind.EXPIRED and batch.processed == 7
