"""How soon the SQLite watch looks at the queue again (``run_queue.LookPacing``)."""

from __future__ import annotations

from nightshift.batch.run_queue import COMMIT_GAP, LOOK_GAP, LookPacing


def test_a_stream_of_commits_is_looked_at_look_gap_apart() -> None:
    pacing = LookPacing()
    assert [pacing.pause(committed=True) for _ in range(3)] == [LOOK_GAP] * 3


def test_a_look_that_came_before_the_commit_it_was_told_of_looks_again_at_once() -> None:
    """A commit writes its log before SQLite shows it: the look it woke found nothing yet."""
    pacing = LookPacing()
    pacing.pause(committed=True)  # the last commit, just before
    assert pacing.pause(committed=False) == COMMIT_GAP < LOOK_GAP


def test_a_long_transaction_writing_its_log_is_looked_at_less_and_less_often() -> None:
    pacing = LookPacing()
    pauses = [pacing.pause(committed=False) for _ in range(8)]
    assert pauses[:3] == [COMMIT_GAP, 2 * COMMIT_GAP, 4 * COMMIT_GAP]
    assert pauses[-1] == LOOK_GAP and pauses == sorted(pauses)
    assert pacing.pause(committed=True) == LOOK_GAP  # its commit, at last
    assert pacing.pause(committed=False) == COMMIT_GAP


def test_after_a_lull_a_write_is_a_new_commit_s() -> None:
    """A checkpoint writes the database file once a second and commits nothing: the looks it
    wakes do not make the next commit wait."""
    pacing = LookPacing()
    for _ in range(8):
        pacing.pause(committed=False)
        pacing.lull()
    assert pacing.pause(committed=False) == COMMIT_GAP
