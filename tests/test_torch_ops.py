"""tilegen's kernels as PyTorch operators, without a GPU: registered with their shape functions, a
model of two GEMMs and an activation compiles with fullgraph=True (no graph break) into one graph
that calls them, and the shape function refuses matrices that do not multiply. Tensors on the meta
device stand in for the GPU's (tests/test_gpu_call_path.py runs them). Skips where torch is missing."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (optional)")
import gen.torch_ops  # noqa: E402,F401 - registers torch.ops.tilegen


def _meta(*shape, dtype=torch.float16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def test_a_model_of_two_gemms_and_an_activation_compiles_into_one_graph_of_tilegen_ops() -> None:
    graphs = []

    def recording(graph, example_inputs):
        graphs.append(graph)
        return graph.forward

    def model(x, w1, w2):
        return torch.ops.tilegen.matmul(torch.relu(torch.ops.tilegen.matmul(x, w1)), w2)

    y = torch.compile(model, fullgraph=True, backend=recording)(_meta(8, 32), _meta(32, 64), _meta(64, 16))
    assert (tuple(y.shape), y.dtype) == ((8, 16), torch.float16)
    assert len(graphs) == 1
    called = [node.target for node in graphs[0].graph.nodes if node.op == "call_function"]
    assert called.count(torch.ops.tilegen.matmul) == 2


def test_any_familys_kernel_writes_its_output_in_a_compiled_graph() -> None:
    def model(x, y):
        torch.ops.tilegen.kernel("transpose", "", [x], y)
        return y * 2

    out = torch.compile(model, fullgraph=True, backend="aot_eager")(_meta(8, 4, dtype=torch.float32),
                                                                    _meta(4, 8, dtype=torch.float32))
    assert (tuple(out.shape), out.dtype) == ((4, 8), torch.float32)


@pytest.mark.parametrize("a, b, error", [
    (_meta(3, 4), _meta(5, 4), r"^tilegen::matmul: \(3, 4\) by \(5, 4\): the inner dimensions differ$"),
    (_meta(3, 4), _meta(4, 5, dtype=torch.float32), r"^tilegen::matmul multiplies two matrices of one type"),
], ids=["inner dimensions", "types"])
def test_the_shape_function_refuses_matrices_that_do_not_multiply(a, b, error) -> None:
    with pytest.raises(RuntimeError, match=error):
        torch.ops.tilegen.matmul(a, b)


def test_a_type_no_family_multiplies_is_one_line() -> None:
    with pytest.raises(gen.UsageError, match="^tilegen::matmul does not multiply torch.int16 tensors$"):
        torch.ops.tilegen.matmul(_meta(3, 4, dtype=torch.int16), _meta(4, 5, dtype=torch.int16))
