"""A family made from one kernel source and a description of its tuning (Kernel Tuner's way of
saying it), kept in a folder: `spec.json` (the parameters, the launch geometry, the arguments),
the template and, in `spec.json`, the `.npy` file of each array (the arguments, the expected
output, the constant-memory arrays), kept once by content for every family (`ARRAYS`). `gen.kernel_tuner.tune.tune_kernel` writes such a folder; its `family.py` subclasses
`family_from_folder(__file__)` in a class statement, so every process that loads the folder from
the family path (the isolated GPU workers, Dask workers) rebuilds the same family.

The parameters reach the source as `#define`s, with block_size_x/y/z and grid_size_x/y/z, as in
Kernel Tuner; `v.tk_defines` holds them for the template (the variant's own attributes are named tk_*, so
that no parameter's name can clash with them). The kernel keeps its own linkage: its name
is `#define`d to the variant's name, and the GPU worker finds the symbol, mangled or not.
"""

from __future__ import annotations

import functools
import json
import math
import pickle
import re
import shutil
from dataclasses import dataclass, make_dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np

from ..core.errors import InvalidVariant, UsageError
from ..core.limits import MAX_THREADS_PER_BLOCK
from ..core.own_files import size_of
from ..core.paths import cache_dir
from .family import Family, Launch, blocks
from .problem import COPY_BANDWIDTH, Ceiling, Input, Output, Problem, Scalar
from .variant import Variant, choice

STORE = "kernel_tuner"  # under tilegen's cache folder: a folder per family made, and ARRAYS
ARRAYS = "arrays"  # in STORE: every family's arrays, each once, named by its content's hash
ARRAY_NAME = re.compile(r"^[0-9a-f]{32}\.npy(?:\.[a-z0-9_]{8})?$")  # and the temporaries of writes cut short
SPEC = "spec.json"
FUNCTIONS = "functions.pickle"  # {"restrictions": [...], "verify": f}: the user's functions, pickled
TEMPLATE = "kernel.cu.j2"
DIMS = ("x", "y", "z")
SCALAR_CTYPES = {"int32": "int", "int64": "long long", "float32": "float", "float64": "double"}
OUTPUT_DTYPES = {"float32": "f32", "float64": "f64"}
RESERVED = ("tk_spec", "tk_rules", "tk_defines", "tk_threads", "tk_grid")  # the made variants' own attributes
RTOL = 1e-5  # numpy.allclose's, which Kernel Tuner's default check uses with `atol`


def family_from_folder(module_file: str) -> type[Family]:
    """The Family class described by the spec.json beside `module_file`; the module there subclasses
    it (a class statement, so that the family path's rule finds it), and that subclass is the family."""
    folder = Path(module_file).resolve().parent
    spec = json.loads((folder / SPEC).read_text())
    functions = pickle.loads((folder / FUNCTIONS).read_bytes()) if (folder / FUNCTIONS).is_file() else {}
    variant_type = _variant_type(spec, rules_of(spec["restrictions"], functions.get("restrictions", [])))
    problem = SourcedProblem(folder, spec, functions.get("verify"))
    attributes = dict(name=spec["family"], summary=f"{spec['kernel_name']} from {spec['source']} (tune_kernel)",
                      variant_type=variant_type, problem=problem, template=TEMPLATE,
                      compile_flags=tuple(spec["flags"]), launch=_launch)
    return type(f"Sourced_{spec['family']}", (Family,), attributes)


# ---- the variant -------------------------------------------------------------------------------

def _variant_type(spec: Mapping[str, Any], restrictions: list[Callable[[dict], bool]]) -> type[Variant]:
    fields = []
    for name, values in spec["tune_params"].items():
        default = spec["default"][name]
        fields.append((name, type(default), choice(default, values, space=values, tag=spec["tags"][name],
                                                   help=f"tune_params[{name!r}]")))
    namespace = {"family": spec["family"], "dtype": spec["dtype"], "tk_spec": spec, "tk_rules": restrictions,
                 "check_combination": _check_combination, "tk_defines": property(_defines),
                 "tk_threads": property(_threads), "tk_grid": property(_grid)}
    cls = make_dataclass(f"Sourced_{spec['family']}_variant", fields, bases=(Variant,), namespace=namespace,
                         frozen=True, order=True)
    return cls


def _check_combination(variant: Any) -> None:
    """The block's threads and the restrictions (every point of a space is checked: the reasons are
    spelt only for a point that breaks one)."""
    params = variant.params()
    block = block_of(params, variant.tk_spec["block_size_names"])
    threads = math.prod(block)
    if threads > MAX_THREADS_PER_BLOCK:
        raise InvalidVariant(f"a block of {' x '.join(map(str, block))} is {threads} threads; the CUDA limit is "
                             f"{MAX_THREADS_PER_BLOCK}")
    broken = broken_rule(variant.tk_rules, variant.tk_spec["restrictions"], params)
    if broken is not None:
        raise InvalidVariant(f"restriction {broken} is false")


def rules_of(strings: Sequence[str], functions: Sequence[Callable[[dict], bool]]) -> list[Callable[[dict], bool]]:
    """The restrictions as functions of a dict of the parameters: the strings' expressions, then the functions."""
    return [functools.partial(evaluate_expression, text) for text in strings] + list(functions)


def broken_rule(rules: Sequence[Callable[[dict], bool]], strings: Sequence[str], params: dict) -> str | None:
    """The first restriction `params` break, named as the user gave it; None when they pass them all.
    A restriction that fails to evaluate (a misspelt name, a function that raises) is a UsageError."""
    for number, rule in enumerate(rules):
        try:
            allowed = bool(rule(params))
        except Exception as error:
            raise UsageError(f"restrictions: {_rule_name(strings, number)} raised {type(error).__name__} ({error}) "
                             f"at {params}; fix it to give True or False for every configuration of tune_params") \
                from None
        if not allowed:
            return _rule_name(strings, number)
    return None


def _rule_name(strings: Sequence[str], number: int) -> str:
    return repr(strings[number]) if number < len(strings) else f"function {number - len(strings) + 1}"


def _threads(variant: Any) -> tuple[int, int, int]:
    return block_of(variant.params(), variant.tk_spec["block_size_names"])


DEFAULT_BLOCK = (256, 1, 1)  # Kernel Tuner's block where block_size_names' parameters are not tuned


def block_of(params: Mapping[str, Any], names: Sequence[str]) -> tuple[int, int, int]:
    """The block, from the parameters named by block_size_names (Kernel Tuner's default for any of
    them that is not a parameter)."""
    return tuple(int(params.get(name, default)) for name, default in zip(names, DEFAULT_BLOCK))  # type: ignore[return-value]


def _grid(variant: Any) -> tuple[int, ...]:
    """The problem size divided by the product of each grid divisor list, rounded up (Kernel Tuner's rule)."""
    spec, params = variant.tk_spec, variant.params()
    grid = []
    for axis, extent in enumerate(spec["problem_size"]):
        divisors = spec["grid_div"][axis]
        divisor = (_threads(variant)[axis] if divisors is None  # Kernel Tuner's default: that axis's block size
                   else math.prod(_value(d, params) for d in divisors))
        grid.append(blocks(extent, divisor))
    return tuple(grid)


def _value(divisor: str | int, params: Mapping[str, Any]) -> int:
    return divisor if isinstance(divisor, int) else int(evaluate_expression(divisor, params))


def _defines(variant: Any) -> dict[str, Any]:
    """What the source is given as #defines, as Kernel Tuner does: the grid and block sizes, every
    parameter and kernel_tuner 1; or, where the user gave `defines`, those alone. The kernel's name
    is always defined as the variant's: the symbol the worker looks for."""
    spec, params = variant.tk_spec, variant.params()
    if spec["defines"] is not None:
        values = {name: _evaluate_define(text, params) for name, text in spec["defines"].items()}
    else:
        grid = variant.tk_grid + (1,) * (3 - len(variant.tk_grid))
        values = {f"grid_size_{axis}": size for axis, size in zip(DIMS, grid)}
        values.update(zip(spec["block_size_names"], variant.tk_threads))
        values.update(params)
        values["kernel_tuner"] = 1
    values[spec["kernel_name"]] = variant.name
    return values


def _evaluate_define(text: str, params: Mapping[str, Any]) -> str:
    """A define's text with each parameter's name replaced by its value (Kernel Tuner's rule)."""
    for name in sorted(params, key=len, reverse=True):
        text = text.replace(name, str(params[name]))
    return text


@functools.lru_cache(maxsize=256)
def _compiled(expression: str) -> Any:
    return compile(expression, f"<restriction {expression!r}>", "eval")


def evaluate_expression(expression: str, params: Mapping[str, Any]) -> Any:
    """An expression of the parameters (a restriction string, a grid divisor), as Python."""
    return eval(_compiled(expression), {"__builtins__": {"min": min, "max": max, "abs": abs, "int": int}},
                dict(params))


def _launch(family: Family, variant: Any, shape: Any) -> Launch:
    return Launch(grid=variant.tk_grid, block=variant.tk_threads)


# ---- the problem -------------------------------------------------------------------------------

class SourcedProblem(Problem):
    """The user's own arrays and scalars, in kernel order. The one argument with an expected value
    (`answer`) is the Output; without one, the first array is, and is not checked. Constant-memory
    arrays are filled before every check."""

    dims: ClassVar[tuple[str, ...]] = ()

    def __init__(self, folder: Path, spec: Mapping[str, Any], verify: Callable[..., Any] | None = None):
        self.folder, self.spec, self.verify = folder, spec, verify
        self.checks_on_host = verify is not None  # type: ignore[misc]
        self.dims = DIMS[:len(spec["problem_size"])]  # type: ignore[misc]
        self.default_sizes = ("x".join(str(d) for d in spec["problem_size"]),)  # type: ignore[misc]
        self.small_size = self.default_sizes[0]  # type: ignore[misc]
        self.arguments = tuple(_argument(a, spec["output"]) for a in spec["arguments"])  # type: ignore[misc]

    @functools.cached_property
    def _arrays(self) -> dict[str, np.ndarray]:
        """The arrays by name, each from the file spec.json names (relative to the folder; an older
        tilegen's folder holds them itself)."""
        files = self.spec.get("arrays") or {path.stem: path.name for path in self.folder.glob("*.npy")}
        return {name: np.load(self.folder / file, mmap_mode="r") for name, file in files.items()}

    def arrays(self, shape: Any) -> dict[str, tuple[int, ...]]:
        return {a["name"]: tuple(a["shape"]) for a in self.spec["arguments"] if a["kind"] == "array"}

    def scalars(self, shape: Any) -> dict[str, int | float]:
        return {a["name"]: a["value"] for a in self.spec["arguments"] if a["kind"] == "scalar"}

    def random_inputs(self, dtype: str, shape: Any, seed: int) -> dict[str, np.ndarray]:
        """The user's own input arrays (every check uses the same values: they go with the answer)."""
        return {a.name: np.array(self._arrays[a.name]) for a in self.arguments if isinstance(a, Input)}

    def reference(self, inputs: Mapping[str, np.ndarray], shape: Any) -> np.ndarray | None:
        if "answer" not in self._arrays or self.verify is not None:  # verify() replaces the check, as in Kernel Tuner
            return None
        return np.asarray(self._arrays["answer"], dtype=np.float64).reshape(self.arrays(shape)[self.output.name])

    def host_check(self, output: np.ndarray, shape: Any) -> str:
        """The user's verify(answer, result, atol=atol), each a list over the arguments (None but
        at the output), as Kernel Tuner calls it."""
        answers = [None] * len(self.arguments)
        results = list(answers)
        index = self.spec["output"]
        answers[index] = np.asarray(self._arrays["answer"]) if "answer" in self._arrays else None
        results[index] = output
        try:
            right = self.verify(answers, results, atol=self.spec["atol"])
        except Exception as error:
            return f"verify() raised {type(error).__name__}: {error}"
        return "" if right else "verify() returned False"

    def initial_output(self, shape: Any) -> np.ndarray:
        """The output array as the user gave it, as Kernel Tuner starts each run (a kernel may add into it)."""
        return np.array(self._arrays[self.output.name])

    def tolerance(self, dtype: str, shape: Any) -> float:
        """numpy.allclose's bound (atol + rtol |ref| per element), in the L2 norm the check uses."""
        norm = self.spec["answer_norm"] or 1.0
        return (self.spec["atol"] * math.sqrt(self.spec["answer_size"]) + RTOL * norm) / norm

    def constants(self, shape: Any) -> dict[str, np.ndarray]:
        return {name: np.array(self._arrays[f"cmem_{name}"]) for name in self.spec["constants"]}

    def ceiling(self, dtype: str) -> Ceiling:
        return COPY_BANDWIDTH

    def work(self, shape: Any, dtype: str) -> float:
        """Every array read or written once."""
        return float(sum(math.prod(a["shape"]) * a["itemsize"] for a in self.spec["arguments"] if a["kind"] == "array"))


def _argument(described: Mapping[str, Any], output: int) -> Input | Output | Scalar:
    if described["kind"] == "scalar":
        # The value is the user's (scalars()); the source names a dimension every shape has.
        return Scalar(described["name"], source="x", ctype=SCALAR_CTYPES[described["dtype"]])
    return Output(described["name"]) if described["index"] == output else Input(described["name"])



# ---- the store: what gen.tune_kernel writes under tilegen's cache folder ----------------------

@dataclass(frozen=True)
class StoreSummary:
    folder: Path
    families: int  # family folders
    arrays: int  # array files
    bytes: int  # of them all


def store_folder() -> Path:
    return cache_dir() / STORE


def _stored() -> tuple[list[Path], list[Path]]:
    """The family folders (those holding a spec.json) and the array files in the store."""
    folder = store_folder()
    families = sorted(p for p in folder.iterdir() if (p / SPEC).is_file()) if folder.is_dir() else []
    arrays = folder / ARRAYS
    files = sorted(p for p in arrays.iterdir() if ARRAY_NAME.match(p.name)) if arrays.is_dir() else []
    return families, files


def store_summary() -> StoreSummary:
    families, arrays = _stored()
    held = sum(size_of(p) for family in families for p in family.rglob("*")) + sum(size_of(p) for p in arrays)
    return StoreSummary(store_folder(), len(families), len(arrays), held)


def clear_store() -> tuple[int, int]:
    """Remove the family folders and arrays gen.tune_kernel wrote, and nothing else: how many of each."""
    families, arrays = _stored()
    for family in families:
        shutil.rmtree(family)
    for array in arrays:
        array.unlink(missing_ok=True)
    return len(families), len(arrays)
