"""What the vLLM engine can run, decided without vLLM: the rule a request carries, the rules and drafters the engine
refuses, and how relaxbench's drafters map to vLLM's speculative methods.

Imported by the driver (in relaxbench's environment, to refuse early) and by the adapter and the worker (in the
vLLM environment), so it imports neither vLLM nor transformers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from relaxbench.errors import ConfigError
from relaxbench.integrations.vllm_client import ENGINE
from relaxbench.paths import TRAINED, trained_head
from relaxbench.policies import Need, VerificationPolicy
from relaxbench.validation import Spec

EXTRA_KEY = "relaxbench"  # the key of ``SamplingParams.extra_args`` that carries a request's rule
NATIVE = "native"  # the rule name that asks for vLLM's own rejection sampler
VLLM_VERSION = "0.32.0"  # the vLLM release relaxbench's adapter is pinned to (the plug-in refuses any other)
FLY_NATIVE = "fly-native"  # the rule name that asks for vLLM's own FLy (rejection_sample_method="fly")
FLY_SINCE = (0, 33, 0)  # the first vLLM release that ships FLy (on a GPU only: docs/conformance.md)

# what vLLM's verification step cannot give a policy: it runs the verify forward itself, without extra tokens,
# and hands the sampler logits only
UNSUPPORTED_NEEDS = (Need.HIDDEN_STATES, Need.DRAFT_HIDDEN_STATES, Need.EXTRA_TOKENS)

# relaxbench drafter kind -> vLLM speculative method (eagle exists only on this engine)
DRAFTER_METHODS = {"model": "draft_model", "ngram": "ngram", "eagle": "eagle", "eagle3": "eagle3", "mtp": "mtp"}
HEAD_DRAFTERS = ("eagle", "eagle3")  # drafters whose checkpoint is the ``head`` knob's


class RuleRequest(Spec):
    """One request's verification rule, carried in ``SamplingParams.extra_args``: a relaxbench policy and its knobs,
    or ``native`` (vLLM's own sampler; with ``adapter`` relaxbench's implementation of that rule through the
    adapter, which is how the tests hold the two against each other); ``tag`` names the request in the step log
    ``log`` (a JSON-lines file)."""

    tag: str
    policy: str = NATIVE
    knobs: dict[str, Any] = {}
    adapter: bool = False
    log: str | None = None


def ships_fly(version: str) -> bool:
    """Whether vLLM ``version`` ships FLy (``rejection_sample_method="fly"``)."""
    release = tuple(int(part) for part in version.split("+")[0].split(".")[:3] if part.isdigit())
    return release >= FLY_SINCE


def check_rule(policy: VerificationPolicy) -> None:
    """Refuse, in one line naming the engine, a policy whose inputs vLLM's verification step does not supply, and
    ``fly-native`` where the vLLM relaxbench's engine is pinned to does not ship FLy."""
    if policy.name == FLY_NATIVE and not ships_fly(VLLM_VERSION):
        raise ConfigError(f"rule {FLY_NATIVE!r} runs vLLM's own FLy, which vLLM {VLLM_VERSION} (the version the "
                          f"{ENGINE} engine is pinned to) does not ship (vLLM >= 0.33 runs it, on a GPU only); run "
                          "'fly-vllm', relaxbench's implementation of vLLM's FLy")
    missing = [need.value for need in UNSUPPORTED_NEEDS if need in policy.needs]
    if missing:
        raise ConfigError(f"rule {policy.name!r} needs {', '.join(missing)}, which the {ENGINE} engine's "
                          "verification step does not supply; run it on the transformers engine (--engine "
                          "transformers)")


def speculative_config(kind: str, knobs: Mapping[str, Any], k: int, draft_model: str | None,
                       greedy_drafts: bool = True, target: str | None = None) -> dict[str, Any]:
    """vLLM's ``speculative_config`` for relaxbench's drafter ``kind`` with ``knobs`` and draft length ``k``; a model
    drafter drafts its top-1 path (``greedy_drafts``) or samples, handing over its distribution (vLLM's
    ``draft_sample_method``). An EAGLE head is the ``head`` knob's checkpoint (speculators' layout or the original,
    which vLLM loads natively; ``trained``: the one ``relaxbench drafter train`` cached for ``target``, the engine's
    reference to it); ``mtp`` drafts with the target's own MTP layers, as vLLM's ``mtp`` method does."""
    method = DRAFTER_METHODS.get(kind)
    if method is None:
        raise ConfigError(f"drafter {kind!r} has no counterpart on the {ENGINE} engine (it runs "
                          f"{', '.join(sorted(DRAFTER_METHODS))}); run it on the transformers engine")
    config: dict[str, Any] = {"method": method, "num_speculative_tokens": k}
    if kind == "ngram":
        config["prompt_lookup_max"] = int(knobs.get("max_ngram", 3))
        config["prompt_lookup_min"] = int(knobs.get("min_ngram", 1))
        return config
    if kind == "mtp":
        if knobs.get("head") is not None:
            raise ConfigError(f"drafter 'mtp' on the {ENGINE} engine drafts with the target's own MTP layers (vLLM "
                              f"{VLLM_VERSION} loads no separate MTP file); leave out the head knob, or run a separate "
                              "MTP head on the transformers engine")
        return config
    if kind in HEAD_DRAFTERS:
        if knobs.get("head") is None:
            raise ConfigError(f"drafter {kind!r} on the {ENGINE} engine needs its head checkpoint: --drafter-knob "
                              "head=PATH_OR_HUB_ID")
        config["model"] = str(knobs["head"])
        if knobs["head"] == TRAINED and target is not None:
            config["model"] = str(trained_head(target, kind))
    else:
        if draft_model is None:
            raise ConfigError(f"drafter {kind!r} on the {ENGINE} engine needs a model: pass --draft PATH")
        config["model"] = draft_model
    config["draft_sample_method"] = "greedy" if greedy_drafts else "probabilistic"
    return config


# config fields that declare a checkpoint's own multi-token-prediction layers, which vLLM's ``mtp`` method drafts with
# (DeepSeek-V3, Qwen3-Next, GLM-4 MoE, MiMo: num_nextn_predict_layers; Qwen3.5: mtp_num_hidden_layers)
MTP_LAYER_FIELDS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")


def declared_mtp_layers(config: Mapping[str, Any]) -> int:
    """How many MTP layers a target's ``config.json`` (or its ``text_config``) declares."""
    for source in (config, config.get("text_config") or {}):
        for field in MTP_LAYER_FIELDS:
            value = source.get(field)
            if isinstance(value, int) and value > 0:
                return value
    return 0


def check_mtp_target(target: str, config: Mapping[str, Any]) -> None:
    """Refuse ``mtp`` on this engine for a target whose config declares no MTP layers, before any engine starts."""
    if declared_mtp_layers(config) == 0:
        architecture = (config.get("architectures") or ["?"])[0]
        raise ConfigError(f"drafter 'mtp' on the {ENGINE} engine drafts with the target's own MTP layers, and "
                          f"{target!r} ({architecture}) declares none ({' / '.join(MTP_LAYER_FIELDS)}); run it on "
                          "the transformers engine with a separate MTP head (--drafter-knob head=PATH)")
