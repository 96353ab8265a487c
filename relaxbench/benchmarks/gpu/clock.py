"""The clock and placement: relaxbench's synchronising clock on a deliberately asynchronous workload, a target
loaded with ``--device-map auto`` on one GPU, and the environment table a compare run records."""

from __future__ import annotations

import time

import torch

from relaxbench.benchmarks.gpu.results import StepResult, verdict
from relaxbench.timing import Clock

SYNC_MATTERS = 5.0  # synchronised / unsynchronised time on a GPU at least this: without the sync, launches are timed
EVENT_TOLERANCE = 0.10  # the synchronised time within 10 % (or 1 ms) of the CUDA events' elapsed time


def async_workload(size: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16, generator=generator)
    return a, a.clone()


@torch.inference_mode()
def clock_check(step: StepResult, device: str, size: int, matmuls: int, held: bool) -> None:
    a, b = async_workload(size, device)
    clock = Clock(device)

    def work() -> None:
        x = a
        for _ in range(matmuls):
            x = torch.mm(x, b)
            x = x / x.abs().amax().clamp_min(1)  # keeps values finite; all queued, nothing read back

    work()  # warm-up: kernel selection, allocator
    clock.now()
    start = clock.now()
    work()
    synced = clock.now() - start
    clock.now()
    start = time.perf_counter()
    work()
    unsynced = time.perf_counter() - start  # the launches only, on an asynchronous device
    clock.now()
    data = {"matmul_size": size, "matmuls": matmuls, "synced_s": synced, "unsynced_s": unsynced}
    ratio = synced / max(unsynced, 1e-9)
    step.add("synced / unsynced time of an async workload", f"{synced * 1e3:.2f} ms / {unsynced * 1e3:.2f} ms "
             f"= {ratio:.1f}×", f"≥ {SYNC_MATTERS:g}× (the sync matters)", verdict(ratio >= SYNC_MATTERS, held))
    if device.startswith("cuda"):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        work()
        end.record()
        end.synchronize()
        events = begin.elapsed_time(end) / 1e3
        flops = 2.0 * size ** 3 * matmuls / synced
        ok = abs(synced - events) <= max(EVENT_TOLERANCE * events, 1e-3)
        step.add("synced clock vs CUDA events", f"{synced * 1e3:.2f} ms vs {events * 1e3:.2f} ms "
                 f"({flops / 1e12:.0f} TFLOP/s by the clock)", f"within {EVENT_TOLERANCE:.0%} or 1 ms",
                 verdict(ok, held))
        data.update({"cuda_events_s": events, "tflops_by_clock": flops / 1e12})
    step.data["clock"] = data


def device_map_check(step: StepResult, device: str, held: bool) -> None:
    from relaxbench.benchmarks.gpu.lossless import AR, random_prompts
    from relaxbench.decoders import build_decoder
    from relaxbench.decoding.loop import DecodeConfig
    from relaxbench.models.load import load_model

    plain = load_model("tiny-random-target", dtype="float32", device=device, quiet=True)
    mapped = load_model("tiny-random-target", dtype="float32", device=device, quiet=True, device_map="auto")
    placed = sorted({str(v) for v in (getattr(mapped.model, "hf_device_map", None) or {}).values()})
    where = sorted({str(p.device) for p in mapped.model.parameters()})
    one_gpu = device.startswith("cuda") and len(where) == 1 and where[0].startswith("cuda")
    step.add("--device-map auto: placement", f"map {placed}; parameters on {where}; inputs on {mapped.device}",
             "every parameter on the one GPU", verdict(one_gpu, held))
    same = 0
    cases = random_prompts(3, plain.logit_dim - 8, seed=3)
    for prompt in cases:
        a = build_decoder(AR, plain, None, DecodeConfig(k=0, max_new_tokens=24)).generate(prompt)
        b = build_decoder(AR, mapped, None, DecodeConfig(k=0, max_new_tokens=24)).generate(prompt)
        same += a.output_ids == b.output_ids
    step.add("--device-map auto: greedy output == plain load", f"{same}/{len(cases)} identical", "all",
             verdict(same == len(cases)))
    step.data["device_map"] = {"hf_device_map": placed, "parameter_devices": where, "input_device": str(mapped.device),
                               "identical": same, "prompts": len(cases)}


def environment_check(step: StepResult, device: str, held: bool) -> None:
    from relaxbench.harness.environment import describe_environment
    from relaxbench.models.load import load_model

    target = load_model("tiny-random-target", dtype="float32", device=device, quiet=True)
    env = describe_environment(target, None, device, argv=["bench", "gpu", "--device", device])
    gpu, driver, cuda = env.get("gpu"), env.get("gpu_driver"), env.get("cuda")
    step.add("GPU, driver, CUDA", f"{gpu}; driver {driver}; CUDA {cuda}", "all three named",
             verdict(bool(gpu and driver and cuda), held))
    step.add("torch, transformers, python", f"{env.get('torch')}, {env.get('transformers')}, {env.get('python')}")
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        env["gpu_properties"] = {"memory_gib": round(props.total_memory / 2**30, 1),
                                 "multiprocessors": props.multi_processor_count,
                                 "capability": f"{props.major}.{props.minor}"}
        step.add("GPU memory, multiprocessors, capability",
                 f"{env['gpu_properties']['memory_gib']} GiB, {props.multi_processor_count}, {props.major}.{props.minor}")
    step.data["environment"] = env
