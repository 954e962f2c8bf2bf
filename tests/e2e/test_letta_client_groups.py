"""Sleep-time groups through letta-client against a live server (one for the module): 1.7.0's
groups resource, and 1.12.1's ``enable_sleeptime`` with the group in the agent's view."""

from __future__ import annotations

import json
from typing import Any

import pytest
from letta_client import Letta, NotFoundError, UnprocessableEntityError

from support.letta_client_1_12 import letta_client_1_12

MODEL = "anthropic/claude-3-5-haiku-20241022"


def test_groups_are_created_listed_changed_and_deleted_with_letta_client_1_7(letta: Letta) -> None:
    main = letta.agents.create(name="main", model=MODEL, memory_blocks=[{"label": "human", "value": "Ada"}])
    helper = letta.agents.create(name="helper", model=MODEL, agent_type="sleeptime_agent")
    made = letta.groups.create(
        agent_ids=[helper.id],
        description="keeps memory",
        manager_config={"manager_type": "sleeptime", "manager_agent_id": main.id, "sleeptime_agent_frequency": 2},
    )
    assert made.manager_type == "sleeptime" and made.manager_agent_id == main.id
    assert made.agent_ids == [helper.id] and made.sleeptime_agent_frequency == 2 and made.turns_counter == 0
    assert letta.groups.retrieve(made.id) == made
    assert [g.id for g in letta.groups.list()] == [made.id]
    assert [g.id for g in letta.groups.list(manager_type="sleeptime")] == [made.id]
    assert list(letta.groups.list(manager_type="round_robin")) == []

    changed = letta.groups.update(
        made.id,
        description="new words",
        manager_config={"manager_type": "sleeptime", "sleeptime_agent_frequency": 4},
    )
    assert changed.description == "new words" and changed.sleeptime_agent_frequency == 4
    assert changed.manager_agent_id == main.id

    with pytest.raises(UnprocessableEntityError, match="round_robin"):
        letta.groups.create(agent_ids=[helper.id], description="turns", manager_config={"manager_type": "round_robin"})

    letta.groups.delete(made.id)
    with pytest.raises(NotFoundError):
        letta.groups.retrieve(made.id)
    assert letta.agents.retrieve(helper.id).id == helper.id  # its agents stay


def test_a_groups_messages_are_its_conversation(letta: Letta) -> None:
    main = letta.agents.create(name="talker", model=MODEL, enable_sleeptime=True)
    response = letta.agents.messages.create(main.id, messages=[{"role": "user", "content": "hello there"}])
    assert response.stop_reason is not None
    group_id = letta.agents.retrieve(main.id).multi_agent_group.id  # type: ignore[union-attr]
    listed = list(letta.groups.messages.list(group_id, order="asc", limit=100))
    said = [m for m in listed if m.message_type == "user_message"]
    assert [m.content for m in said] == ["hello there"]
    assert "assistant_message" in [m.message_type for m in listed]
    # The client's iterator walks every page once.
    walked = [m.id for m in letta.groups.messages.list(group_id, order="asc", limit=1)]
    assert len(set(walked)) == len({m.id for m in listed})


def test_enable_sleeptime_with_letta_client_1_12(letta_1_12: Any) -> None:
    main = letta_1_12.agents.create(
        name="dreamer", model=MODEL, memory_blocks=[{"label": "human", "value": "Ada"}], enable_sleeptime=True
    )
    assert main.enable_sleeptime is True
    group = main.managed_group
    assert group is not None and group.manager_type == "sleeptime" and group.manager_agent_id == main.id
    (helper_id,) = group.agent_ids
    helper = letta_1_12.agents.retrieve(helper_id)
    assert helper.name == "dreamer-sleeptime" and helper.agent_type == "sleeptime_agent"
    assert {b.label for b in helper.blocks} >= {"human", "memory_persona"}
    again = letta_1_12.agents.retrieve(main.id)
    assert again.managed_group is not None and again.managed_group.id == group.id
    listed = {a.id: a for a in letta_1_12.agents.list()}
    assert listed[main.id].managed_group.agent_ids == [helper_id]
    assert listed[helper_id].managed_group is None and listed[helper_id].enable_sleeptime is False

    letta_1_12.agents.delete(main.id)
    with pytest.raises(letta_client_1_12().NotFoundError):
        letta_1_12.agents.retrieve(helper_id)


def test_an_agent_file_keeps_the_sleep_time_group(letta: Letta) -> None:
    main = letta.agents.create(
        name="keeper", model=MODEL, memory_blocks=[{"label": "human", "value": "Ada"}], enable_sleeptime=True
    )
    exported = json.loads(letta.agents.export_file(main.id))
    (group,) = exported["groups"]
    assert len(exported["agents"]) == 2
    assert group["manager_config"]["manager_type"] == "sleeptime"
    imported = letta.agents.import_file(file=("keeper.af", json.dumps(exported).encode())).agent_ids
    assert len(imported) == 2
    shown = [letta.agents.retrieve(i) for i in imported]
    (new_main,) = [a for a in shown if a.multi_agent_group is not None]
    new_group = new_main.multi_agent_group
    assert new_group is not None and new_group.manager_agent_id == new_main.id
    assert new_group.id != main.multi_agent_group.id  # type: ignore[union-attr]
    assert new_group.agent_ids == [a.id for a in shown if a.id != new_main.id]
