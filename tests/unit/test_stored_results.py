"""A batch item's stored result is versioned JSON: what is stored today, and what was stored
before results carried a version, reads back as the same answer."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from nightshift.domain.answers import RESULT_VERSION, ModelError, ModelResponse, OutcomeStatus, StoredResult
from nightshift.domain.messages import ToolCall
from nightshift.domain.usage import Usage

CALL = {"id": "toolu_1", "name": "send_message", "arguments": '{"message": "hi"}'}
USAGE = {"input_tokens": 10, "output_tokens": 3, "cache_read_tokens": 0, "cache_write_tokens": 2}


def test_a_result_travels_as_json_with_its_version() -> None:
    answered = StoredResult(
        status=OutcomeStatus.SUCCEEDED,
        response=ModelResponse(
            tool_calls=(ToolCall(**CALL),),
            reasoning="greet",
            request_heartbeat=True,
            usage=Usage(input_tokens=10, output_tokens=3, cache_write_tokens=2, cache_write_1h_tokens=2),
            stop_reason="tool_use",
            model="claude-test",
        ),
        raw={"custom_id": "item-1"},
    )
    failed = StoredResult(status=OutcomeStatus.ERRORED, error=ModelError(type="overloaded_error", message="busy"))
    for result in (answered, failed):
        stored = orjson.loads(orjson.dumps(result.to_json()))
        assert stored["schema_version"] == RESULT_VERSION
        assert StoredResult.from_json(stored) == result
    assert StoredResult.from_json(failed.to_json()).error == ModelError(type="overloaded_error", message="busy")


def test_results_stored_before_they_were_versioned_read_back() -> None:
    answer: dict[str, Any] = {
        "reasoning": None, "request_heartbeat": False, "text": None, "usage": USAGE, "stop_reason": "tool_use",
        "model": "claude-test",
    }  # fmt: skip
    today = {"status": "succeeded", "response": {**answer, "tool_calls": [CALL]}, "error": None, "raw": {}}
    # As stored before turns held several calls: one "tool_call", or null.
    one_call = {**today, "response": {**answer, "tool_call": CALL}}
    no_call = {**today, "response": {**answer, "tool_call": None, "text": "bye"}}

    for stored in (today, one_call):
        response = StoredResult.from_json(stored).response
        assert response is not None and response.tool_calls == (ToolCall(**CALL),)
        assert response.usage == Usage(input_tokens=10, output_tokens=3, cache_write_tokens=2)
    silent = StoredResult.from_json(no_call).response
    assert silent is not None and silent.tool_calls == () and silent.text == "bye"
    errored = StoredResult.from_json(
        {"status": "errored", "response": None, "error": {"type": "api_error", "message": "x"}, "raw": {}}
    )
    assert errored.status is OutcomeStatus.ERRORED and errored.error is not None and errored.error.retryable


def test_a_result_of_a_newer_version_is_refused() -> None:
    newer = {**StoredResult(status=OutcomeStatus.EXPIRED).to_json(), "schema_version": RESULT_VERSION + 1}
    with pytest.raises(ValueError, match="newer"):
        StoredResult.from_json(newer)
