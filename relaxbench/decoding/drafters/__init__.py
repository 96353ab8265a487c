"""Drafters: where the k proposed tokens come from. Importing this package registers every built-in drafter.

``base`` holds the protocol and the registry; each other module is one family of drafters and registers itself.
"""

from relaxbench.decoding.drafters import heads, layerskip, model, ngram, oracle  # noqa: F401  (they register)
from relaxbench.decoding.drafters.base import DRAFTERS, Drafter, DrafterInputs, Proposal, register_drafter
from relaxbench.decoding.drafters.heads import Eagle3Drafter, MTPDrafter
from relaxbench.decoding.drafters.layerskip import LayerSkipDrafter
from relaxbench.decoding.drafters.model import DraftModelDrafter, LMDrafter, draft_autoregressively
from relaxbench.decoding.drafters.ngram import NgramVerifiedByDraftLM, PromptLookupDrafter, prompt_lookup
from relaxbench.decoding.drafters.oracle import OracleDrafter, write_replay

__all__ = ["DRAFTERS", "DraftModelDrafter", "Drafter", "DrafterInputs", "Eagle3Drafter", "LMDrafter",
           "LayerSkipDrafter", "MTPDrafter", "NgramVerifiedByDraftLM", "OracleDrafter", "PromptLookupDrafter",
           "Proposal", "draft_autoregressively", "prompt_lookup", "register_drafter", "write_replay"]
