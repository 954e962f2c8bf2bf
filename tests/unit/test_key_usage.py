"""When a key's use is worth writing, and what a caller may do with keys: pure, no database."""

from __future__ import annotations

import pytest

from nightshift.domain.orgs import DEFAULT_ORG_ID, Caller, CallerKind, key_prefix
from nightshift.errors import Forbidden
from nightshift.services.keys import Throttle, check_manages_keys, new_secret


def test_a_use_is_written_once_per_interval_per_key() -> None:
    throttle = Throttle(60)
    assert throttle.due("user-a", 1000.0)
    assert not throttle.due("user-a", 1000.5)
    assert not throttle.due("user-a", 1059.9)
    assert throttle.due("user-b", 1059.9)  # each key has its own clock
    assert throttle.due("user-a", 1060.0)
    assert not throttle.due("user-a", 1061.0)
    throttle.forget("user-a")  # its write failed
    assert throttle.due("user-a", 1061.0)


def test_the_prefix_is_the_scheme_and_eight_characters() -> None:
    secret = new_secret()
    assert secret.startswith("ns-") and len(secret) == 3 + 43
    assert key_prefix(secret) == secret[:11]
    assert key_prefix("an-old-style-key") == "an-old-s"


@pytest.mark.parametrize(
    ("caller", "allowed"),
    [
        (Caller(organization_id=DEFAULT_ORG_ID, kind=CallerKind.PASSWORD), True),
        (Caller(organization_id="org-a", kind=CallerKind.API_KEY, key_id="user-a", is_admin=True), True),
        (Caller(organization_id="org-a", kind=CallerKind.API_KEY, key_id="user-a"), False),
        (Caller(organization_id=DEFAULT_ORG_ID, kind=CallerKind.ANONYMOUS), False),
    ],
    ids=["password", "admin-key", "plain-key", "anonymous"],
)
def test_who_manages_keys(caller: Caller, allowed: bool) -> None:
    if allowed:
        check_manages_keys(caller)
    else:
        with pytest.raises(Forbidden, match="managing API keys needs"):
            check_manages_keys(caller)
