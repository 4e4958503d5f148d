"""Kernel Tuner's description of a kernel (its source, problem size, arguments, tunable parameters,
grid divisors, restrictions, constant memory) turned into a tilegen family folder: what
`gen.tune_kernel` tunes. The folder holds `spec.json`, the template and a `family.py` that rebuilds
the family from them (`gen.families.sourced`), so every process that loads it from the family path
has the same family; the arrays are `.npy` files beside the family folders, each kept once by
content (`sourced.ARRAYS`). The folder's name is the family's: the kernel's name and a hash of
everything but the arrays' values, so the same call tunes the same family (and what the tuning
database holds of it is recalled, not measured again). `describe` checks a call and names its
family without writing anything; `write_family` writes it.
"""

from __future__ import annotations

import glob
import hashlib
import io
import itertools
import json
import os
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..core.errors import UsageError
from ..core.limits import MAX_THREADS_PER_BLOCK
from ..core.own_files import write_atomically
from ..families.builtin import BUILTIN_FAMILIES
from ..families.sourced import (ARRAYS, FUNCTIONS, OUTPUT_DTYPES, RESERVED, SCALAR_CTYPES, SPEC, TEMPLATE, block_of,
                                broken_rule, store_folder)
from ..families.variant import Variant

SOURCE_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".c", ".cpp", ".j2", ".jinja", ".jinja2")
JINJA_SUFFIXES = (".j2", ".jinja", ".jinja2")
JINJA_SOURCE = "source.cu.j2"  # a .j2 kernel_source's copy in the family folder
FAMILY_MODULE = '''"""Made by gen.tune_kernel for {kernel}; rebuilt from spec.json and the arrays beside it."""
from gen.families.sourced import family_from_folder

SourcedFamily = family_from_folder(__file__)


class {cls}(SourcedFamily):
    """Kernel Tuner's {kernel}, as a tilegen family (everything it knows is in spec.json)."""
'''


@dataclass(frozen=True)
class Source:
    text: str
    label: str  # the file's path, or "<string>"
    jinja: bool
    folders: tuple[Path, ...]  # where its #includes are found


@dataclass(frozen=True)
class Made:
    family: str
    folder: Path
    spec: dict[str, Any]
    template: str
    source: Source
    arrays: dict[str, np.ndarray]  # by name
    pickled: bytes  # the user's functions (restrictions, verify)


def read_source(kernel_source: Any) -> Source:
    """Kernel Tuner's kernel_source: code, a file name, or a list of files (the kernel's first, the
    others found by its #includes). A file ending in .j2 is a Jinja template."""
    files = list(kernel_source) if isinstance(kernel_source, (list, tuple)) else [kernel_source]
    if not files or not all(isinstance(f, (str, Path)) for f in files):
        raise UsageError("kernel_source must be CUDA code, a file name or a list of file names; tilegen takes no "
                         f"function (write a Jinja template to a .j2 file instead); got {kernel_source!r}")
    first = files[0]
    if isinstance(first, str) and ("\n" in first or not first.endswith(SOURCE_SUFFIXES)):
        return Source(first, "<string>", False, ())
    paths = [Path(f).expanduser().resolve() for f in files]
    for path in paths:
        if not path.is_file():
            raise UsageError(f"kernel_source: {path} is not a file; give the kernel's file or its code")
    return Source(_text_of(paths[0]), str(paths[0]), paths[0].suffix in JINJA_SUFFIXES,
                  tuple(dict.fromkeys(p.parent for p in paths)))


def _text_of(path: Path) -> str:
    """A source file's text, read as UTF-8 (as tilegen renders and compiles every source)."""
    data = path.read_bytes()
    try:
        return data.decode()
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise UsageError(f"kernel_source: {path} line {line} holds the byte 0x{data[error.start]:02x}, which is not "
                         f"UTF-8; tilegen reads sources as UTF-8: save the file as UTF-8") from None


def clean_tune_params(tune_params: Any) -> dict[str, list[Any]]:
    """tune_params as Python values: integers (bool and numpy ones included) or identifier strings."""
    if not isinstance(tune_params, Mapping) or not tune_params:
        raise UsageError(f"tune_params must be a dict of parameter names and value lists; got {tune_params!r}")
    cleaned = {}
    for name, values in tune_params.items():
        if not isinstance(name, str) or not name.isidentifier() or name in ("time", "grid_size_x", "grid_size_y",
                                                                              "grid_size_z"):
            raise UsageError(f"tune_params: {name!r} cannot be a parameter name (a C identifier, not time or "
                             f"grid_size_x/y/z)")
        if name in RESERVED or name == "dtype" or hasattr(Variant, name):
            raise UsageError(f"tune_params: {name!r} is a name tilegen's variants use themselves; rename the "
                             f"parameter (in tune_params and the source)")
        values = list(values) if isinstance(values, (list, tuple, range, np.ndarray)) else None
        if not values:
            raise UsageError(f"tune_params[{name!r}] must be a non-empty list of values")
        cleaned[name] = [_value(name, v) for v in values]
        if len(set(cleaned[name])) != len(cleaned[name]):
            raise UsageError(f"tune_params[{name!r}] lists a value twice")
    return cleaned


def _value(name: str, value: Any) -> int | str:
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)) and value >= 0:
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9]+", value):
        return value
    raise UsageError(f"tune_params[{name!r}]: {value!r} is not a value tilegen tunes; give whole numbers >= 0 "
                     f"or strings of letters and digits")


def tags(names: Sequence[str]) -> dict[str, str]:
    """A short, distinct name tag per parameter: the initials of its words (block_size_x: bsx)."""
    chosen: dict[str, str] = {}
    for name in names:
        tag = "".join(word[0] for word in name.split("_") if word and word[0].isalpha()).lower() or "p"
        while tag in chosen.values():
            tag += "x"
        chosen[name] = tag
    return chosen


def first_valid(tune_params: Mapping[str, list[Any]], rules: Sequence[Callable[[dict], bool]],
                restrictions: Sequence[str], block_size_names: Sequence[str]) -> dict[str, Any]:
    """The first configuration, in Kernel Tuner's order, that passes the restrictions (`rules`, the
    strings among them first) and fits a block."""
    for values in itertools.product(*tune_params.values()):
        params = dict(zip(tune_params, values))
        threads = np.prod(block_of(params, block_size_names))
        if threads <= MAX_THREADS_PER_BLOCK and broken_rule(rules, restrictions, params) is None:
            return params
    raise UsageError("no configuration of tune_params passes the restrictions with at most 1024 threads per block")


def describe_arguments(arguments: Any, answer: Any) -> tuple[list[dict[str, Any]], dict[str, np.ndarray], int]:
    """The arguments as spec entries, the arrays to save, and the index of the output to check
    (the one with an answer; without an answer, the first array, not checked)."""
    if not isinstance(arguments, (list, tuple)) or not arguments:
        raise UsageError("arguments must be a list of NumPy arrays and NumPy scalars, in the kernel's order")
    answers = _answers(answer, len(arguments))
    described, arrays = [], {}
    for index, argument in enumerate(arguments):
        name = f"arg{index}"
        if isinstance(argument, np.ndarray):
            _check_numbers(argument, f"arguments[{index}]")
            described.append(dict(kind="array", name=name, index=index, dtype=str(argument.dtype),
                                  shape=list(argument.shape), itemsize=argument.itemsize))
            arrays[name] = argument
        elif isinstance(argument, np.generic) and str(argument.dtype) in SCALAR_CTYPES:
            described.append(dict(kind="scalar", name=name, index=index, dtype=str(argument.dtype),
                                  value=argument.item()))
        else:
            raise UsageError(f"arguments[{index}]: {type(argument).__name__} is not a NumPy array or a NumPy scalar "
                             f"of type {', '.join(SCALAR_CTYPES)} (write numpy.int32(n), not n)")
    output = _output(described, answers)
    if answers:
        arrays["answer"] = _answer_array(answers[output], arrays[f"arg{output}"], output)
    return described, arrays, output


def _answers(answer: Any, count: int) -> list[Any] | None:
    if answer is None:
        return None
    if not isinstance(answer, (list, tuple)) or len(answer) != count:
        raise UsageError(f"answer must be a list as long as arguments ({count}), None for every argument not checked")
    given = [i for i, a in enumerate(answer) if a is not None]
    if len(given) != 1:
        raise UsageError(f"answer gives {len(given)} expected outputs; tilegen checks one output array: give None for "
                         f"the others")
    return list(answer)


def _output(described: list[dict[str, Any]], answers: list[Any] | None) -> int:
    arrays = [a["index"] for a in described if a["kind"] == "array"]
    if not arrays:
        raise UsageError("arguments hold no array; tilegen needs the kernel's output array among them")
    output = next(i for i, a in enumerate(answers) if a is not None) if answers else arrays[0]
    if output not in arrays:
        raise UsageError(f"answer[{output}] is given for a scalar argument; give it for the output array")
    if described[output]["dtype"] not in OUTPUT_DTYPES:
        what = "answer is given for" if answers else "the output (the first array, as no answer is given) is"
        raise UsageError(f"{what} arguments[{output}] of type {described[output]['dtype']}; tilegen checks float32 "
                         f"or float64 outputs")
    return output


def _answer_array(expected: Any, argument: np.ndarray, index: int) -> np.ndarray:
    expected = np.asarray(expected)
    if expected.size != argument.size:
        raise UsageError(f"answer[{index}] has {expected.size} elements; arguments[{index}] has {argument.size}")
    return expected.astype(np.float64).reshape(argument.shape)


def constants(cmem_args: Any) -> dict[str, np.ndarray]:
    if cmem_args is None:
        return {}
    if not isinstance(cmem_args, Mapping) or not all(isinstance(v, np.ndarray) and isinstance(k, str)
                                                     and k.isidentifier() for k, v in cmem_args.items()):
        raise UsageError("cmem_args must be a dict of __constant__ symbol names and NumPy arrays")
    for name, array in cmem_args.items():
        _check_numbers(array, f"cmem_args[{name!r}]")
    return {f"cmem_{name}": array for name, array in cmem_args.items()}


def _check_numbers(array: np.ndarray, what: str) -> None:
    """An array tilegen can copy to the GPU: of numbers (booleans, integers or floats)."""
    if array.dtype.kind not in "biuf":
        raise UsageError(f"{what} is an array of {array.dtype}; give a NumPy array of numbers (booleans, integers "
                         f"or floats), as the kernel's argument takes")


def family_name(kernel_name: str, digest: str) -> str:
    """A lowercase identifier without '_': the kernel's letters and digits, then the hash."""
    base = re.sub(r"[^a-z0-9]", "", kernel_name.lower())
    if not base or not base[0].isalpha() or base in {cls.name for cls in BUILTIN_FAMILIES}:
        base = f"kt{base}"
    return f"{base}{digest[:8]}"


def describe(spec: dict[str, Any], source: Source, arrays: Mapping[str, np.ndarray], functions: Mapping[str, Any],
             resumable: bool) -> Made:
    """The family of a call, checked and named, nothing written. Its folder is named by the call's
    description; the family, by that and the arrays' values too, so that the tuning database
    recalls rows measured on other inputs or answers only when asked to (`resumable`: Kernel
    Tuner's `cache=`, which resumes whatever the values)."""
    pickled = _pickled(functions)
    described = {k: v for k, v in spec.items() if k != "answer_norm"}
    digest = hashlib.sha256(json.dumps([described, source.text, len(pickled)], sort_keys=True).encode())
    folder = store_folder() / family_name(spec["kernel_name"], digest.hexdigest())
    if not resumable:
        for name in sorted(arrays):
            digest.update(name.encode() + np.ascontiguousarray(arrays[name]).tobytes())
    files = {name: f"../{ARRAYS}/{_content_hash(array)}.npy" for name, array in arrays.items()}
    spec = dict(spec, family=family_name(spec["kernel_name"], digest.hexdigest()), source=source.label, arrays=files)
    return Made(spec["family"], folder, spec, template(spec, source), source, dict(arrays), pickled)


def _content_hash(array: np.ndarray) -> str:
    """What names an array's file: its element type, shape and values."""
    content = hashlib.sha256(f"{array.dtype.str} {array.shape}".encode())
    content.update(np.ascontiguousarray(array).tobytes())
    return content.hexdigest()[:32]


def write_family(made: Made) -> None:
    """The family folder under tilegen's cache (made again each call: the arrays are this call's),
    and each of its arrays that the store does not hold yet."""
    folder = made.folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder.parent / ARRAYS).mkdir(exist_ok=True)
    for name, array in made.arrays.items():
        stored = folder / made.spec["arrays"][name]
        if not stored.is_file():
            buffer = io.BytesIO()
            np.save(buffer, np.ascontiguousarray(array))
            write_atomically(stored, buffer.getvalue())
    for stale in folder.glob("*.npy"):  # the copies an older tilegen kept here
        stale.unlink()
    (folder / FUNCTIONS).unlink(missing_ok=True)
    if made.pickled:
        (folder / FUNCTIONS).write_bytes(made.pickled)
    if made.source.jinja:
        (folder / JINJA_SOURCE).write_text(made.source.text)
    (folder / TEMPLATE).write_text(made.template)
    (folder / SPEC).write_text(json.dumps(made.spec, indent=1))
    for stale in folder.glob("family*.py"):  # the module of the last call's values: a module per family name,
        stale.unlink()  # as a folder's modules are imported once per process
    (folder / f"family_{made.family}.py").write_text(
        FAMILY_MODULE.format(kernel=made.spec["kernel_name"], cls=f"Family{made.family}"))


def template(spec: Mapping[str, Any], source: Source) -> str:
    """The family's template: the banner, a #define per value of v.tk_defines, and the source, copied
    as it is (Jinja's raw) or, from a .j2 file, rendered with each define as a name."""
    lines = ['{% import "macros.cu.j2" as m %}', "{{ m.banner(name, params, template, template_hash, command, "
             "version) }}", "{% for key, value in v.tk_defines.items() %}", "#define {{ key }} {{ value }}",
             "{% endfor %}", f'#line 1 "{source.label}"']
    if source.jinja:
        names = ["grid_size_x", "grid_size_y", "grid_size_z", *spec["block_size_names"], *spec["tune_params"]]
        lines += [f"{{% set {n} = v.tk_defines[{n!r}] %}}" for n in dict.fromkeys(names)]
        lines.append(f'{{% include "{JINJA_SOURCE}" %}}')
    else:
        if "{% endraw %}" in source.text:
            raise UsageError(f"kernel_source {source.label} holds '{{% endraw %}}'; tilegen copies the source inside "
                             f"Jinja's raw block, which that would end")
        lines += ["{% raw %}" + source.text + "{% endraw %}"]
    return "\n".join(lines) + "\n"


def _pickled(functions: Mapping[str, Any]) -> bytes:
    """The user's functions ({"restrictions": [...], "verify": f}), for the worker processes: by
    value with cloudpickle where it is installed, else by reference (so a function of the script
    being run cannot go)."""
    named = [(option, f) for option, value in functions.items()
             for f in (value if isinstance(value, list) else [value]) if f is not None]
    if not named:
        return b""
    try:
        import cloudpickle

        return cloudpickle.dumps(dict(functions))
    except ImportError:
        pass
    for option, function in named:
        if getattr(function, "__module__", "") == "__main__" or getattr(function, "__name__", "") == "<lambda>":
            raise UsageError(f"{option}: {function!r} lives in the script itself, which tilegen's worker processes "
                             f"cannot import; move it to a module, or pip install cloudpickle")
    try:
        return pickle.dumps(dict(functions))
    except Exception as error:
        raise UsageError(f"{named[0][0]}: a function cannot be sent to tilegen's worker processes ({error}); move "
                         f"it to a module, or pip install cloudpickle") from None


def include_flags(source: Source) -> list[str]:
    """-I for the source's folders and, where found, the CUDA toolkit's headers (as Kernel Tuner
    adds them), CUDA 13's CCCL folder (cub, thrust) included."""
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda",
             *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)]
    include = next((Path(h) / "include" for h in homes if h and (Path(h) / "include" / "cuda.h").is_file()), None)
    folders = [*source.folders, *([include, include / "cccl"] if include else [])]
    return [f"-I{folder}" for folder in folders if folder.is_dir()]
