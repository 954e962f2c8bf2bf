"""Use cases behind the API and CLI: validate, then read and write through the store in bulk."""
