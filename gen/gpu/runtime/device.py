"""What identifies a GPU (its model, L2 size, driver), read through pycuda: in the GPU worker process,
or in the caller's process for its current context (gen.call.lookup)."""

from __future__ import annotations

from typing import Any

import pycuda.driver as cuda

from ...core import nvidia_smi
from ...core.results import DeviceInfo


def read_device_info(device: Any, physical_index: int) -> DeviceInfo:
    """What identifies a pycuda Device's model, and its L2 size."""
    attribute = cuda.device_attribute
    major, minor = device.compute_capability()
    return DeviceInfo(
        name=device.name(), cc=f"{major}.{minor}", sm_count=device.get_attribute(attribute.MULTIPROCESSOR_COUNT),
        memory_bytes=device.total_memory(), l2_bytes=device.get_attribute(attribute.L2_CACHE_SIZE),
        driver=driver_version(physical_index), index=physical_index)


def current_device_info() -> DeviceInfo | None:
    """The GPU of the caller's current context, or None when there is none."""
    try:
        return read_device_info(cuda.Context.get_device(), 0)
    except cuda.Error:
        return None


def driver_version(physical_index: int) -> str:
    """The driver's version as nvidia-smi prints it (580.159.04), else the CUDA API version it serves."""
    listed = nvidia_smi.query(["driver_version"], gpu=physical_index)
    if listed:
        return listed[0]
    api = cuda.get_driver_version()
    return f"CUDA {api // 1000}.{api % 1000 // 10}"
