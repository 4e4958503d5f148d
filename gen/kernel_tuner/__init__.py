"""gen.tune_kernel: Kernel Tuner's call, tuned as a family made on the fly."""
