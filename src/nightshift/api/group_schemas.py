"""/v1/groups bodies and view, in Letta's shapes (its Group, GroupCreate and GroupUpdate).

Letta's manager config is a union told apart by ``manager_type``; nightshift runs the
``sleeptime`` kind only, so the body takes one flat config and ``check_manager_type`` answers a
422 naming any other kind as not supported (an absent config is Letta's default,
``round_robin``, refused the same way). The view writes Letta's fields for the other kinds
(``max_turns``, ``termination_token``...) as null.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from nightshift.api.input import Body, Name, Text
from nightshift.domain.groups import Group, check_frequency, check_manager_type
from nightshift.domain.limits import MAX_LIST_ITEMS
from nightshift.domain.unset import UNSET, given
from nightshift.errors import InvalidInput
from nightshift.services.groups import GroupChanges, GroupSpec

Ids = Annotated[list[str], Field(max_length=MAX_LIST_ITEMS)]


class ManagerConfigBody(Body):
    """Letta's manager config; of its kinds only ``sleeptime`` is accepted (the others' fields are ignored)."""

    manager_type: Name = Field(default="round_robin", description="sleeptime (the only kind nightshift runs)")
    manager_agent_id: Name | None = Field(default=None, description="The main agent, the one the user talks to")
    sleeptime_agent_frequency: int | None = Field(
        default=None, description="The main agent's turns between two runs of its sleep-time agents"
    )


class GroupCreate(Body):
    """Letta's GroupCreate: a sleep-time group of agents that exist."""

    agent_ids: Ids = Field(description="The sleep-time agents")
    description: Text = ""
    manager_config: ManagerConfigBody = Field(default_factory=ManagerConfigBody)
    shared_block_ids: Ids = Field(default_factory=list)
    hidden: bool | None = None

    def to_spec(self) -> GroupSpec:
        config = self.manager_config
        check_manager_type(config.manager_type)
        if config.manager_agent_id is None:
            raise InvalidInput(
                "a sleeptime group needs its main agent: manager_config.manager_agent_id",
                field="manager_config.manager_agent_id",
            )
        return GroupSpec(
            agent_ids=self.agent_ids,
            manager_agent_id=config.manager_agent_id,
            description=self.description,
            # As Letta's: a group made without a frequency runs its sleep-time agents every turn.
            sleeptime_agent_frequency=check_frequency(config.sleeptime_agent_frequency),
            shared_block_ids=self.shared_block_ids,
            hidden=self.hidden,
        )


class GroupUpdate(Body):
    """Letta's GroupUpdate: absent or null fields stay as they are."""

    agent_ids: Ids | None = None
    description: Text | None = None
    manager_config: ManagerConfigBody | None = None
    shared_block_ids: Ids | None = None

    def to_changes(self) -> GroupChanges:
        config = self.manager_config
        if config is not None:
            check_manager_type(config.manager_type)
        return GroupChanges(
            agent_ids=given(self.agent_ids),
            description=given(self.description),
            manager_agent_id=UNSET if config is None else given(config.manager_agent_id),
            sleeptime_agent_frequency=(
                UNSET if config is None else given(check_frequency(config.sleeptime_agent_frequency))
            ),
            shared_block_ids=given(self.shared_block_ids),
        )


class GroupPublic(BaseModel):
    """Letta's Group."""

    id: str
    manager_type: str
    agent_ids: list[str]
    description: str
    project_id: None = None
    template_id: None = None
    base_template_id: None = None
    deployment_id: None = None
    shared_block_ids: list[str]
    manager_agent_id: str | None
    termination_token: None = None
    max_turns: None = None
    sleeptime_agent_frequency: int | None
    turns_counter: int | None
    last_processed_message_id: str | None
    max_message_buffer_length: None = None
    min_message_buffer_length: None = None
    hidden: bool | None

    @classmethod
    def of(cls, group: Group) -> GroupPublic:
        return cls(**group_fields(group))


def group_fields(group: Group) -> dict[str, Any]:
    """GroupPublic's fields, in its order: the JSON of a group, for the agent views that carry one."""
    return {
        "id": group.id,
        "manager_type": group.manager_type.value,
        "agent_ids": list(group.agent_ids),
        "description": group.description,
        "project_id": None,
        "template_id": None,
        "base_template_id": None,
        "deployment_id": None,
        "shared_block_ids": list(group.shared_block_ids),
        "manager_agent_id": group.manager_agent_id,
        "termination_token": None,
        "max_turns": None,
        "sleeptime_agent_frequency": group.sleeptime_agent_frequency,
        "turns_counter": group.turns_counter,
        "last_processed_message_id": group.last_processed_message_id,
        "max_message_buffer_length": None,
        "min_message_buffer_length": None,
        "hidden": group.hidden,
    }
