"""Tools: JSON schemas from Python source, and the subprocess sandbox that runs custom tools."""
