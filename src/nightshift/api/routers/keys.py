"""/v1/keys: an organization's API keys, for its admin keys and the server password holder."""

from __future__ import annotations

from nightshift.api.deps import Conn, KeyAdmin, Now
from nightshift.api.errors import FORBIDDEN_RESPONSES
from nightshift.api.key_schemas import KeyCreate, KeyCreatedPublic, KeyPublic
from nightshift.api.routers import secured
from nightshift.services import keys as service

router = secured("keys", responses=FORBIDDEN_RESPONSES)


@router.get("/v1/keys/")
@router.get("/v1/keys", include_in_schema=False)
async def list_keys(conn: Conn, caller: KeyAdmin) -> list[KeyPublic]:
    """The caller's organization's keys, oldest first, revoked ones included. Never a secret."""
    return [KeyPublic.of(k) for k in await service.list_keys(conn, org_id=caller.organization_id)]


@router.post("/v1/keys/")
@router.post("/v1/keys", include_in_schema=False)
async def create_key(body: KeyCreate, conn: Conn, caller: KeyAdmin, now: Now) -> KeyCreatedPublic:
    """A new key of the caller's organization. Its secret (`key`) is in this response only."""
    key, secret = await service.create_key(conn, caller.organization_id, body.name, now=now, is_admin=body.is_admin)
    return KeyCreatedPublic.created(key, secret)


@router.delete("/v1/keys/{key_id}")
async def revoke_key(key_id: str, conn: Conn, caller: KeyAdmin, now: Now) -> KeyPublic:
    """Revoke a key: from the next request on it is refused (401) by every server process.

    Revoking a revoked key is not an error: the key is returned as it is. A key of another
    organization is a 404.
    """
    key, _ = await service.revoke_key(conn, key_id, now=now, org_id=caller.organization_id)
    return KeyPublic.of(key)
