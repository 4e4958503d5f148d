"""The CUDA bindings: the device, its context, launches and regions cleared."""
