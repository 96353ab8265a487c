"""Grading: an LLM grader grades stored answers after generation, in one place.

``protocol.py`` is the contract of a task's grading protocol (a graded scorer: requests out, verdicts in);
``llm_grader.py`` (MT-Bench's rating) and ``refusal_grader.py`` (the refusal classification) are the protocols;
``graders.py`` the graders that answer them (the grader interface, the local grader, the registry the endpoint
grader plugs into); ``step.py`` the grading pass over a stored run, with ``cache.py`` what it needs from the store
(the verdict cache). Importing this package registers the protocols as scorers and the local grader; ``relaxbench.
tasks`` imports it, so a task naming a grading protocol always finds it."""

from relaxbench.grading import graders, llm_grader, refusal_grader  # noqa: F401  (registration)
