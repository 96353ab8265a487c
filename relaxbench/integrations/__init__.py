"""Bridges to other tools. ``lm_eval``: relaxbench as an lm-evaluation-harness model (``--model relaxbench``);
``lm_eval_tasks``: the offline lm-eval task folder (``tasks/lm_eval``) prepared for ``--include_path``;
``ray_executor`` and ``ray_worker``: ``compare --executor ray`` on a Ray cluster.
``endpoint_grader``: an OpenAI-compatible chat-completions server as the LLM grader (entry point
``relaxbench.graders: endpoint``).

Nothing here is imported by the rest of the package, so relaxbench works without these tools being imported.
"""
