"""The GPU worker's device through pycuda: its primary context, what identifies it (its model, L2
size, driver), events and waits. The caller's current context is read through the driver API
(gen.gpu.runtime.native). Importing this module needs no pycuda: each function imports it when called."""

from __future__ import annotations

from typing import Any

from ...core import nvidia_smi
from ...core.results import DeviceInfo


def open_primary_context(physical_index: int) -> tuple[DeviceInfo, str]:
    """Make the primary context of the one visible GPU current (pycuda.autoprimaryctx, so CuPy or
    PyTorch in the same process share it); what identifies the GPU, and its PCI bus id (for NVML)."""
    import pycuda.autoprimaryctx
    import pycuda.driver as cuda

    device, attribute = pycuda.autoprimaryctx.device, cuda.device_attribute
    major, minor = device.compute_capability()
    return DeviceInfo(
        name=device.name(), cc=f"{major}.{minor}", sm_count=device.get_attribute(attribute.MULTIPROCESSOR_COUNT),
        memory_bytes=device.total_memory(), l2_bytes=device.get_attribute(attribute.L2_CACHE_SIZE),
        driver=nvidia_smi.driver_version(physical_index, cuda.get_driver_version),
        index=physical_index), device.pci_bus_id()


def event(recorded: bool = False) -> Any:
    """A CUDA event of the current context, `recorded` now (else by `record()`) on the default stream;
    then `synchronize()`, `query()` and `time_since(start)` (milliseconds)."""
    import pycuda.driver as cuda

    made = cuda.Event()
    if recorded:
        made.record()
    return made


def synchronize() -> None:
    """Wait for all work of the current context, on every stream."""
    import pycuda.driver as cuda

    cuda.Context.synchronize()
