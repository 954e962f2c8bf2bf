"""Batch runs: submit a step as provider batches, poll them, apply their results, continue."""
