"""nightshift: stateful LLM agents stepped through the providers' batch APIs."""

__version__ = "0.1.0"
