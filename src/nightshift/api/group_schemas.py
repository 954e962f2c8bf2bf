"""Groups in Letta's shape: the bodies of /v1/groups and the view of a group (an agent's
``managed_group`` too). nightshift runs sleep-time groups; the other manager types are named in
a body so that a client asking for one hears they are not supported rather than "invalid"."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from nightshift.api.input import Body, Ids, Name, Text
from nightshift.domain.groups import Group, ManagerType, check_frequency, check_manager_type


class ManagerConfigBody(Body):
    """Letta's manager config: its type, and for a sleep-time group its main agent and frequency."""

    manager_type: Annotated[str, Field(max_length=32)] = ManagerType.ROUND_ROBIN.value
    manager_agent_id: Name | None = None
    sleeptime_agent_frequency: int | None = None

    def checked(self) -> ManagerConfigBody:
        """Itself, once its type is one nightshift runs (a 422 naming it otherwise)."""
        check_manager_type(self.manager_type)
        check_frequency(self.sleeptime_agent_frequency)
        return self


class GroupCreate(Body):
    """Letta's GroupCreate."""

    agent_ids: Ids
    description: Text = ""
    manager_config: ManagerConfigBody = Field(default_factory=ManagerConfigBody)
    shared_block_ids: Ids = Field(default_factory=list)
    hidden: bool | None = None
    project_id: Name | None = None


class GroupUpdate(Body):
    """Letta's GroupUpdate: absent (or null) fields stay as they are."""

    agent_ids: Ids | None = None
    description: Text | None = None
    manager_config: ManagerConfigBody | None = None
    shared_block_ids: Ids | None = None
    project_id: Name | None = None


class GroupPublic(BaseModel):
    """Letta's Group."""

    id: str
    manager_type: Literal["round_robin", "supervisor", "dynamic", "sleeptime", "voice_sleeptime", "swarm"]
    agent_ids: list[str]
    description: str
    manager_agent_id: str | None
    sleeptime_agent_frequency: int | None
    turns_counter: int | None
    last_processed_message_id: str | None
    shared_block_ids: list[str]
    hidden: bool | None
    project_id: str | None = None
    template_id: str | None = None
    base_template_id: str | None = None
    deployment_id: str | None = None
    termination_token: str | None = None
    max_turns: int | None = None
    max_message_buffer_length: int | None = None
    min_message_buffer_length: int | None = None
    created_at: datetime
    updated_at: datetime


def group_json(group: Group) -> dict[str, Any]:
    """The group as ``GroupPublic``'s JSON fields (a dict, for agents' views written by hand too)."""
    return {
        "id": group.id,
        "manager_type": group.manager_type.value,
        "agent_ids": list(group.agent_ids),
        "description": group.description,
        "manager_agent_id": group.manager_agent_id,
        "sleeptime_agent_frequency": group.sleeptime_agent_frequency,
        "turns_counter": group.turns_counter,
        "last_processed_message_id": group.last_processed_message_id,
        "shared_block_ids": list(group.shared_block_ids),
        "hidden": group.hidden,
        "project_id": None,
        "template_id": None,
        "base_template_id": None,
        "deployment_id": None,
        "termination_token": None,
        "max_turns": None,
        "max_message_buffer_length": None,
        "min_message_buffer_length": None,
        "created_at": group.created_at,
        "updated_at": group.updated_at,
    }
