"""Organizations own every object; API keys map a caller to one organization.

An API key's state machine (a key is a row of ``users``)::

    active -> revoked        (``nightshift keys revoke`` or ``DELETE /v1/keys/{id}``; never back)

Only a key's sha256 hash and a short prefix of it (to tell keys apart) are stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

DEFAULT_ORG_ID = "org-00000000-0000-4000-8000-000000000000"
DEFAULT_ORG_NAME = "default"

# Every key nightshift makes starts with this; the prefix kept in the clear is it plus this many characters.
KEY_SCHEME = "ns-"
KEY_PREFIX_CHARS = 8


def key_prefix(secret: str) -> str:
    """The part of a key that is stored in the clear and shown, to tell keys apart.

    ``ns-`` and the next 8 characters (48 of a key's 256 random bits): enough to recognise a key,
    far too little to guess the rest.
    """
    scheme = KEY_SCHEME if secret.startswith(KEY_SCHEME) else ""
    return secret[: len(scheme) + KEY_PREFIX_CHARS]


@dataclass(frozen=True, slots=True, kw_only=True)
class Organization:
    id: str
    name: str
    created_at: datetime


class KeyStatus(StrEnum):
    """Whether an API key lets its holder in."""

    ACTIVE = "active"  # accepted -> revoked
    REVOKED = "revoked"  # refused with 401 from the next request on, in every process (terminal)


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiKey:
    """An API key, without its secret. ``key_prefix`` is None for keys made before prefixes were kept."""

    id: str
    organization_id: str
    name: str
    key_prefix: str | None
    is_admin: bool
    created_at: datetime
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None

    @property
    def status(self) -> KeyStatus:
        return KeyStatus.ACTIVE if self.revoked_at is None else KeyStatus.REVOKED


class CallerKind(StrEnum):
    """How a request proved who it is."""

    PASSWORD = "password"  # the server password: the default organization, and its keys' admin
    API_KEY = "api_key"  # an API key: the key's organization (its keys' admin if the key is an admin key)
    ANONYMOUS = "anonymous"  # nothing, on a server without a password: the default organization


@dataclass(frozen=True, slots=True, kw_only=True)
class Caller:
    """Who sent a request: its organization and, for an API key, which key."""

    organization_id: str
    kind: CallerKind
    key_id: str | None = None
    is_admin: bool = False

    @property
    def manages_keys(self) -> bool:
        """Whether the caller may list, create and revoke its organization's keys."""
        return self.kind is CallerKind.PASSWORD or (self.kind is CallerKind.API_KEY and self.is_admin)
