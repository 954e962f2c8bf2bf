"""Domain types and pure logic: agents, blocks, messages, tools, tool rules, batch runs."""
