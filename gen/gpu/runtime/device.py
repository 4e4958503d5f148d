"""What identifies a GPU (its model, L2 size, driver), read through pycuda in the GPU worker process
(the caller's current context is read through the driver API: gen.gpu.runtime.native)."""

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
        driver=nvidia_smi.driver_version(physical_index, cuda.get_driver_version), index=physical_index)
