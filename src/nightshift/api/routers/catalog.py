"""/v1/tags and /v1/models: the tags in use and the models an agent may name, in Letta's shapes."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Query

from nightshift.api.deps import Conn, Org
from nightshift.api.routers import secured
from nightshift.domain.agents import DEFAULT_MAX_TOKENS
from nightshift.domain.pagination import MAX_PAGE
from nightshift.services import catalog as service

router = secured("models")


@router.get("/v1/tags/")
@router.get("/v1/tags", include_in_schema=False)
async def list_tags(
    conn: Conn,
    org: Org,
    after: Annotated[str | None, Query(description="Tags after this one in the listing's order")] = None,
    before: Annotated[str | None, Query(description="Tags before this one in the listing's order")] = None,
    limit: Annotated[int | None, Query(ge=1, le=MAX_PAGE)] = 50,
    order: Annotated[Literal["asc", "desc"], Query(description="Alphabetical, or reversed")] = "asc",
    order_by: Annotated[Literal["name"], Query()] = "name",
    name: Annotated[str | None, Query(description="Tags containing this text, in any case")] = None,
    query_text: Annotated[str | None, Query(description="Letta's older name for name")] = None,
) -> list[str]:
    """The distinct tags of the organization's agents, alphabetically."""
    return await service.list_tags(
        conn,
        org,
        after=after,
        before=before,
        limit=limit,
        descending=order == "desc",
        containing=name or query_text,
    )


@router.get("/v1/models/")
@router.get("/v1/models", include_in_schema=False)
async def list_models(
    provider_name: Annotated[str | None, Query(description="Only this provider's models (a handle's prefix)")] = None,
    provider_type: Annotated[str | None, Query(description="The same as provider_name")] = None,
    provider_category: Annotated[list[str] | None, Query(description="Letta's base/byok: every model is base")] = None,
) -> list[dict[str, Any]]:
    """The chat models of nightshift's providers that its price data knows, as Letta's Model.

    Any model of a provider may be given to an agent as ``provider/model``; these are the ones
    whose prices and context windows nightshift knows.
    """
    if provider_category and "base" not in provider_category:
        return []
    provider = provider_name or provider_type
    return [
        {
            "handle": f"{m.provider}/{m.name}",
            "name": m.name,
            "display_name": m.name,
            "model": m.name,
            "model_type": "llm",
            "model_endpoint_type": m.provider,
            "provider_type": m.provider,
            "provider_name": m.provider,
            "provider_category": "base",
            "context_window": m.context_window,
            "max_context_window": m.context_window,
            "max_tokens": DEFAULT_MAX_TOKENS,
            "parallel_tool_calls": True,
        }
        for m in service.list_models(provider)
    ]


@router.get("/v1/models/embedding")
async def list_embedding_models() -> list[dict[str, Any]]:
    """The embedding models an agent may name (``embedding``), as Letta's EmbeddingModel.

    nightshift stores the name only: archival memory and conversation search are full-text.
    """
    return [
        {
            "handle": f"{m.provider}/{m.name}",
            "name": m.name,
            "display_name": m.name,
            "embedding_model": m.name,
            "embedding_endpoint_type": m.provider,
            "embedding_dim": m.dimensions,
            "model_type": "embedding",
            "provider_type": m.provider,
            "provider_name": m.provider,
            "provider_category": "base",
        }
        for m in service.list_embedding_models()
    ]
