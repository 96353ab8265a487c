"""Torch operations beneath the policies: sampling, exact reductions, the shared rejection sampler.

This layer imports only torch and the project's foundation (errors, registry, validation, timing), so policies and
the decoding loop can both build on it without importing each other.
"""
