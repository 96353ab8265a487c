"""The vLLM general plugin (entry-point group ``vllm.general_plugins``) that installs relaxbench's adapter.

vLLM loads general plugins in every process that builds a model runner (the engine core and its workers) before
the runner is built. There is no registry for the rejection sampler, so this plugin replaces the one name the
model runner builds it from — ``vllm.v1.worker.gpu_model_runner.RejectionSampler``, used once, in
``GPUModelRunner.__init__`` (the CPU runner inherits it) — with ``RelaxbenchRejectionSampler``, a subclass that
falls back to vLLM's own sampler for requests that name no rule. This is the one place relaxbench reaches into
another library; vLLM is pinned exactly (``VLLM_VERSION``) and ``tests/test_vllm_pin.py`` checks the place.

The plugin acts only in processes started by relaxbench's worker (``RELAXBENCH_VLLM_ADAPTER=1``), so an unrelated
vLLM in the same environment is left as it is.
"""

from __future__ import annotations

import os

from relaxbench.integrations.vllm_rules import VLLM_VERSION  # the one vLLM release the adapter is pinned to

ENABLE_VARIABLE = "RELAXBENCH_VLLM_ADAPTER"


def register() -> None:
    """Entry point: put the adapter where the model runner builds its rejection sampler."""
    if os.environ.get(ENABLE_VARIABLE) != "1":
        return
    import vllm
    from vllm.v1.worker import gpu_model_runner

    if vllm.__version__ != VLLM_VERSION:
        raise RuntimeError(f"relaxbench's vLLM adapter is pinned to vLLM {VLLM_VERSION}, found {vllm.__version__}; "
                           "run `make install-vllm`")
    from relaxbench.integrations.vllm_adapter import RelaxbenchRejectionSampler

    if not hasattr(gpu_model_runner, "RejectionSampler"):
        raise RuntimeError("vllm.v1.worker.gpu_model_runner no longer builds RejectionSampler: the pinned vLLM "
                           "version moved the place relaxbench's adapter goes")
    gpu_model_runner.RejectionSampler = RelaxbenchRejectionSampler
