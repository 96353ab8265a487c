"""Device specs for analytic profiles: the shipped ``profiles/devices.yaml`` (memory bandwidth, dense bf16 FLOP/s,
memory per device, and the serving stack's achieved fractions and per-forward overhead), each number with its
source in the file. The loader refuses a number without a source, so the file cannot drift into unsourced
figures."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from relaxbench.errors import ConfigError
from relaxbench.profiles.spec import Curve
from relaxbench.registry import did_you_mean
from relaxbench.validation import Finite, Spec, Text, builtin_dir, load_yaml, validate

DEVICES_FILE = "devices.yaml"


def _sourced(spec: Spec, numbers: tuple[str, ...]) -> None:
    sources = spec.sources  # type: ignore[attr-defined]
    missing = [name for name in numbers if getattr(spec, name) is not None and not sources.get(name, "").strip()]
    if missing:
        raise ValueError(f"no source given for {', '.join(missing)} (sources: {{field: where the number is from}})")


class Stack(Spec):
    """What the serving software achieves on a device: the fraction of peak memory bandwidth a decode step reaches
    (measured at batch size 1), the fraction of dense peak FLOP/s a compute-bound forward (prefill, a large batch)
    reaches, and a fixed cost per forward (kernel launches and the gaps between them). The roofline applies them at
    every batch size."""

    achieved_bandwidth: Finite = Field(gt=0, le=1)  # a fraction of the peak
    achieved_flops: Finite = Field(gt=0, le=1)
    overhead_per_forward_s: Finite = Field(ge=0)
    sources: dict[str, Text] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _sources(self) -> Stack:
        _sourced(self, ("achieved_bandwidth", "achieved_flops", "overhead_per_forward_s"))
        return self


class Device(Spec):
    """One accelerator's peak figures (per device; dense, no sparsity)."""

    name: Text
    memory_bandwidth_tb_s: Finite = Field(gt=0)  # HBM/GDDR bandwidth, TB/s (10^12 bytes/s)
    bf16_dense_tflops: Finite = Field(gt=0)  # dense bf16 tensor-core peak, TFLOP/s
    memory_gb: Finite = Field(gt=0)  # memory per device, GB (10^9 bytes)
    stack: Stack | None = None  # the defaults' when None
    sources: dict[str, Text] = Field(default_factory=dict)
    notes: Text = ""

    @model_validator(mode="after")
    def _sources(self) -> Device:
        _sourced(self, ("memory_bandwidth_tb_s", "bf16_dense_tflops", "memory_gb"))
        return self

    @property
    def bandwidth(self) -> float:
        """Bytes per second."""
        return self.memory_bandwidth_tb_s * 1e12

    @property
    def flops(self) -> float:
        """Dense bf16 FLOP per second."""
        return self.bf16_dense_tflops * 1e12


class Host(Spec):
    """Work a deployment does on the host CPU whatever the accelerator: prompt-lookup n-gram matching."""

    ngram_lookup: Curve
    sources: dict[str, Text] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _sources(self) -> Host:
        _sourced(self, ("ngram_lookup",))
        return self


class DeviceCatalog(Spec):
    defaults: Stack
    host: Host
    devices: dict[str, Device]

    def stack_of(self, device: Device) -> Stack:
        return device.stack or self.defaults

    def get(self, name: str) -> Device:
        if name not in self.devices:
            raise ConfigError(f"unknown device {name!r}{did_you_mean(name, list(self.devices))} "
                              f"(devices: {', '.join(self.devices)})")
        return self.devices[name]


def devices_path() -> Path:
    return builtin_dir("profiles") / DEVICES_FILE


@lru_cache(maxsize=4)
def _load(path: Path) -> DeviceCatalog:
    return validate(DeviceCatalog, load_yaml(path), str(path))


def device_catalog(path: str | Path | None = None) -> DeviceCatalog:
    """The shipped device specs (or those of ``path``)."""
    return _load(Path(path) if path is not None else devices_path())


def device_names() -> list[str]:
    return list(device_catalog().devices)


def describe_device(name: str) -> dict[str, Any]:
    device = device_catalog().get(name)
    return {"name": device.name, "bandwidth TB/s": device.memory_bandwidth_tb_s,
            "bf16 dense TFLOP/s": device.bf16_dense_tflops, "memory GB": device.memory_gb}
