"""A server knows its database is at head from the versions folder's file names: the same head as Alembic's."""

from alembic.script import ScriptDirectory

from nightshift.store.db import alembic_config, head_revision


def test_head_from_the_file_names_is_alembics_head() -> None:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    assert head_revision() == head
