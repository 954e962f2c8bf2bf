"""Tools: JSON schemas from Python source, base tools, and the sandbox that runs custom tools."""
