"""letta-client 1.7.0's groups against a real server: sleep-time groups made, listed, changed,
their messages read and deleted; another manager type refused by name."""

from __future__ import annotations

from typing import Any

import pytest
from letta_client import Letta, UnprocessableEntityError

MODEL = "anthropic/claude-3-5-haiku-20241022"


def _agent(letta: Letta, name: str, **extra: Any) -> Any:
    return letta.agents.create(name=name, model=MODEL, memory_blocks=[{"label": "human", "value": ""}], **extra)


def test_a_sleeptime_group_through_the_groups_calls(letta: Letta) -> None:
    main = _agent(letta, "main")
    helper = letta.agents.create(
        name="keeper", model=MODEL, agent_type="sleeptime_agent", block_ids=[main.blocks[0].id]
    )
    group = letta.groups.create(
        agent_ids=[helper.id],
        description="keeps main's memory",
        manager_config={"manager_type": "sleeptime", "manager_agent_id": main.id, "sleeptime_agent_frequency": 3},
    )
    assert (group.manager_type, group.manager_agent_id, group.agent_ids) == ("sleeptime", main.id, [helper.id])
    assert group.sleeptime_agent_frequency == 3 and group.turns_counter == 0
    managed = letta.agents.retrieve(main.id).multi_agent_group
    assert managed is not None and managed.id == group.id

    paired = _agent(letta, "paired", enable_sleeptime=True)
    listed = [g.id for g in letta.groups.list(manager_type="sleeptime")]
    assert listed == [group.id, paired.multi_agent_group.id]

    changed = letta.groups.update(
        group.id, manager_config={"manager_type": "sleeptime", "sleeptime_agent_frequency": 1}
    )
    assert (
        changed.sleeptime_agent_frequency == 1 and letta.groups.retrieve(group.id).description == "keeps main's memory"
    )
    letta.agents.messages.create(main.id, messages=[{"role": "user", "content": "hello"}])
    kinds = {m.message_type for m in letta.groups.messages.list(group.id)}
    assert {"system_message", "user_message"} <= kinds, kinds

    with pytest.raises(UnprocessableEntityError) as refused:
        letta.groups.create(agent_ids=[helper.id], description="", manager_config={"manager_type": "round_robin"})
    assert "round_robin" in str(refused.value) and "not supported" in str(refused.value)

    letta.groups.delete(group.id)
    assert letta.agents.retrieve(main.id).multi_agent_group is None
    assert letta.agents.retrieve(helper.id).id == helper.id  # its agents stay
