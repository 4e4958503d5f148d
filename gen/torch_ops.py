"""`import gen.torch_ops` registers tilegen's tuned kernels as PyTorch custom operators
(torch.ops.tilegen.matmul and torch.ops.tilegen.kernel, gen.call.torch_ops); it imports torch,
which `import gen` never does."""

from .call import torch_ops  # noqa: F401 - registering is importing it
