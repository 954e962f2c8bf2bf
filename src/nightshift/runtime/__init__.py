"""Step logic shared by synchronous and batch stepping: prompts, memory, tool calls."""
