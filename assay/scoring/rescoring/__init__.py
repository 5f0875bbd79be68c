"""Re-scoring under new criteria: what is stale, the re-score batches, criteria diffs and the batch lane."""
