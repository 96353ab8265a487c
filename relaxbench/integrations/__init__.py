"""Bridges to other tools: lm-evaluation-harness, Ray, OpenAI-compatible chat-completions servers. What each module
does is in docs/design.md ("Layout").

Nothing here is imported by the rest of the package, so relaxbench works without these tools being imported.
"""
