"""The decoding engine: one loop for every arm, drafters, cache rollback, per-round counters."""
