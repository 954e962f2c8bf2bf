"""Request and response bodies of ``/v1/keys``. No response but the creating one holds a key's secret."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field

from nightshift.api.input import Body, Name
from nightshift.domain.orgs import ApiKey, KeyStatus


class KeyCreate(Body):
    """A new API key of the caller's organization."""

    name: Annotated[Name, Field(min_length=1, description="What the key is for, to recognise it later")] = "api-user"
    is_admin: bool = Field(default=False, description="Whether the key may manage the organization's keys")


class KeyPublic(BaseModel):
    """An API key, without its secret."""

    id: str
    organization_id: str
    name: str
    prefix: str | None = Field(
        description="The key's first characters (`ns-` and 8 more), to tell keys apart; null for keys "
        "made before prefixes were kept"
    )
    is_admin: bool
    status: KeyStatus
    created_at: datetime
    last_used_at: datetime | None = Field(description="When it was last used, to the minute; null if never")
    revoked_at: datetime | None

    @classmethod
    def of(cls, key: ApiKey) -> KeyPublic:
        return cls(
            id=key.id,
            organization_id=key.organization_id,
            name=key.name,
            prefix=key.key_prefix,
            is_admin=key.is_admin,
            status=key.status,
            created_at=key.created_at,
            last_used_at=key.last_used_at,
            revoked_at=key.revoked_at,
        )


class KeyCreatedPublic(KeyPublic):
    """A key just made, with its secret: shown this once, never again."""

    key: str = Field(description="The API key itself: store it now, it cannot be shown again")

    @classmethod
    def created(cls, key: ApiKey, secret: str) -> KeyCreatedPublic:
        return cls(**KeyPublic.of(key).model_dump(), key=secret)
