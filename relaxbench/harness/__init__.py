"""The harness: plan a run (plan.py), execute its jobs (executor.py, runner.py), store every sample (store.py)."""
