"""The one place relaxbench reaches into vLLM, checked against the installed vLLM (in its own environment).

vLLM has no registry for its rejection sampler; the plugin replaces the name the model runner builds it from. If
a vLLM upgrade moves that place, this test fails and says where to look, before any run silently falls back to
vLLM's own sampler. Skipped only where the vLLM environment is not installed (``make install-vllm``); CI
installs it (``REQUIRE_VLLM=1``).
"""

from __future__ import annotations

import subprocess
import textwrap

import pytest

from relaxbench.errors import ConfigError
from relaxbench.integrations.vllm_client import vllm_python

CHECK = textwrap.dedent('''
    import inspect, sys
    import vllm
    from vllm.v1.sample import rejection_sampler
    from vllm.v1.worker import gpu_model_runner
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    from relaxbench.integrations.vllm_plugin import VLLM_VERSION

    problems = []
    if vllm.__version__ != VLLM_VERSION:
        problems.append(f"vLLM {vllm.__version__} installed, the adapter is pinned to {VLLM_VERSION}")
    if getattr(gpu_model_runner, "RejectionSampler", None) is not rejection_sampler.RejectionSampler:
        problems.append("vllm.v1.worker.gpu_model_runner no longer imports RejectionSampler by name")
    init = inspect.getsource(gpu_model_runner.GPUModelRunner.__init__)
    if init.count("RejectionSampler(") != 1 or "self.rejection_sampler = RejectionSampler(" not in init:
        problems.append("GPUModelRunner.__init__ no longer builds self.rejection_sampler = RejectionSampler(...) once")
    module = inspect.getsource(gpu_model_runner)
    if module.count("RejectionSampler(") != 1:
        problems.append("gpu_model_runner builds RejectionSampler in more than one place")
    if not issubclass(CPUModelRunner, gpu_model_runner.GPUModelRunner) or "__init__" in vars(CPUModelRunner) and \\
            "RejectionSampler" in inspect.getsource(CPUModelRunner):
        problems.append("the CPU model runner no longer inherits the sampler's construction from GPUModelRunner")
    params = list(inspect.signature(rejection_sampler.RejectionSampler.forward).parameters)
    if params != ["self", "metadata", "draft_probs", "logits", "sampling_metadata"]:
        problems.append(f"RejectionSampler.forward takes {params}")
    init_params = list(inspect.signature(rejection_sampler.RejectionSampler.__init__).parameters)
    if init_params != ["self", "sampler", "spec_config", "device"]:
        problems.append(f"RejectionSampler.__init__ takes {init_params}")
    for name in ("draft_token_ids", "num_draft_tokens", "cu_num_draft_tokens", "target_logits_indices",
                 "bonus_logits_indices"):
        if name not in rejection_sampler.SpecDecodeMetadata.__dataclass_fields__:
            problems.append(f"SpecDecodeMetadata has no {name}")
    if rejection_sampler.PLACEHOLDER_TOKEN_ID != -1:
        problems.append("the placeholder token id changed")
    from importlib.metadata import entry_points
    if not any(ep.value == "relaxbench.integrations.vllm_plugin:register"
               for ep in entry_points(group="vllm.general_plugins")):
        problems.append("relaxbench's vllm.general_plugins entry point is not installed in the vLLM environment")
    import os
    os.environ["RELAXBENCH_VLLM_ADAPTER"] = "1"
    from relaxbench.integrations.vllm_plugin import register
    register()
    from relaxbench.integrations.vllm_adapter import RelaxbenchRejectionSampler
    if gpu_model_runner.RejectionSampler is not RelaxbenchRejectionSampler:
        problems.append("the plugin did not install the adapter")
    print("\\n".join(problems))
    sys.exit(1 if problems else 0)
''')


@pytest.mark.slow
def test_the_place_the_adapter_goes_has_not_moved():
    try:
        python = vllm_python()
    except ConfigError as exc:
        pytest.skip(str(exc))
    result = subprocess.run([str(python), "-c", CHECK], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, (
        "relaxbench's vLLM adapter replaces vllm.v1.worker.gpu_model_runner.RejectionSampler, built once in "
        "GPUModelRunner.__init__; in the installed vLLM that place moved (see relaxbench/integrations/"
        f"vllm_plugin.py):\n{result.stdout}{result.stderr[-2000:]}")
