"""A zygote's answer line decodes to the same result whether it is small (orjson, on the event
loop) or large (json with Python hooks, on a thread): see ``nightshift.tools.zygotes``."""

from __future__ import annotations

import time

import pytest

from nightshift.tools.zygotes import decode

LINES = [
    b'{"ok": true, "value": {"a": [1, 2.5, null, true, "\\u00e9\\ud83d\\ude00"], "b": {}}, "error": null, '
    b'"stdout": "hi\\n", "stderr": ""}',
    b'{"ok": false, "value": null, "error": "ValueError: bad", "stdout": "", "stderr": "trace"}',
    b'{"ok": true, "value": [{"k": -0}, {"k": 1e-7}, {"k": 9007199254740993}], "error": null, '
    b'"stdout": "", "stderr": ""}',
    # What the zygote's encoder writes for NaN and infinities, and what parses as infinite:
    # neither decoder takes them.
    b'{"ok": true, "value": NaN, "error": null, "stdout": "", "stderr": ""}',
    b'{"ok": true, "value": [-Infinity], "error": null, "stdout": "", "stderr": ""}',
    b'{"ok": true, "value": 1e400, "error": null, "stdout": "", "stderr": ""}',
    # Not an answer at all.
    b'{"ok": "yes", "value": 1, "error": null, "stdout": "", "stderr": ""}',
    b'{"ok": true, "value": 1',
]


@pytest.mark.parametrize("line", LINES)
def test_a_large_answer_decodes_as_a_small_one_would(line: bytes) -> None:
    started = time.perf_counter()

    small, large = decode(line, started), decode(line, started, large=True)

    assert (large.ok, large.value, large.error, large.stdout, large.stderr) == (
        small.ok,
        small.value,
        small.error,
        small.stdout,
        small.stderr,
    )
