"""The house rules of a package laid out like `gen/`, read from its source (nothing is imported):
the floors' order, only the face at the package root, no import cycles, each checked third-party
package on its floors, and sizes.
`check(root)` returns one line per finding; `python -m tests.house [ROOT]` prints them, exit 1 if any."""
import ast
import sys
from pathlib import Path

# The floor a module is on is its folder under the package root, or its folder two deep where that
# is a floor of its own (gpu/process, gpu/runtime). A floor may import itself and the floors named.
# The package root holds only the face (FACE), which may import any floor: its names are lazy.
FACE = {"__init__", "__main__", "api", "torch_ops"}  # torch_ops: the import that registers the PyTorch operators
MAY_IMPORT = {"core": set(), "families": {"core"}}
MAY_IMPORT["compiling"] = MAY_IMPORT["gpu/runtime"] = MAY_IMPORT["store"] = {"core", "families"}
MAY_IMPORT["gpu/process"] = {"core", "families", "gpu/runtime"}  # what runs inside the GPU worker
MAY_IMPORT["gpu"] = {"core", "families", "gpu/process"}  # the executors; the CUDA bindings only in a worker
MAY_IMPORT["evaluate"] = {"core", "families", "compiling", "gpu", "gpu/process", "gpu/runtime"}
MAY_IMPORT["search"] = {"core", "families", "evaluate", "store"}  # never the compile layer or gpu/ (the session builds them)
MAY_IMPORT["call"] = {"core", "families", "compiling", "gpu/runtime", "evaluate", "store"}  # the user's program
MAY_IMPORT["commands"] = MAY_IMPORT["search"] | {"search", "call"}
MAY_IMPORT["kernel_tuner"] = MAY_IMPORT["commands"] | {"commands"}
MAY_IMPORT["cli"] = MAY_IMPORT["commands"] | {"commands"}

# Each third-party package (or part of one), by its dotted prefix, and the floors that import it.
THIRD_PARTY = {
    "pycuda": {"gpu/runtime"}, "cuda": {"gpu/runtime"},  # the CUDA bindings' one owner (the driver API: cuda.bindings)
    "torch": {"gpu/process", "call"}, "cupy": {"gpu/process"},  # cuBLAS ceilings; call/torch_ops
    "pynvml": {"gpu/process"}, "distributed": {"gpu"}, "dask": {"gpu"},
    "cuda.bindings.nvrtc": {"compiling"}, "cuda.pathfinder": {"compiling", "gpu/runtime"},  # NVRTC, the compiler; cuBLAS
    "jinja2": {"compiling"}, "matplotlib": {"store"}, "ml_dtypes": {"families"},
}
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def modules(root):
    """Dotted module name -> path, for every module under the package folder `root`."""
    found = {}
    for path in sorted(Path(root).rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def layer(name):
    """The floor of a dotted module name (its folder under the package, two deep where that is a
    floor), else "face": a module at the package root."""
    parts = name.split(".")[1:]
    floors = ["/".join(parts[:depth]) for depth in (2, 1) if len(parts) >= depth]
    return next((floor for floor in floors if floor in MAY_IMPORT), "face")


def imported(name, path, node):
    """The dotted names an import statement in module `name` names (relative ones resolved)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    target = node.module or ""
    if node.level:
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        target = ".".join(package[: len(package) - node.level + 1] + ([target] if target else []))
    return [f"{target}.{a.name}" for a in node.names]


def _own(dotted, mods):
    """The module of the package that `dotted` names (a name inside a module: that module)."""
    while dotted not in mods and "." in dotted:
        dotted = dotted.rsplit(".", 1)[0]
    return dotted if dotted in mods else None


def _third_party_floors(dotted):
    prefixes = [p for p in THIRD_PARTY if dotted == p or dotted.startswith(p + ".")]
    return THIRD_PARTY[max(prefixes, key=len)] if prefixes else None


def _read(root):
    """Each module's imports of the package's own modules (inside functions too), and findings."""
    mods, edges, findings = modules(root), {}, []
    for name, path in mods.items():
        source = path.read_text()
        if layer(name) == "face" and path.stem not in FACE:
            findings.append(f"{path}: the package root holds only the face ({', '.join(sorted(FACE))}); "
                            f"move it onto a floor")
        if len(source.splitlines()) > MAX_MODULE_LINES:
            findings.append(f"{path}: {len(source.splitlines())} lines (at most {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(source, str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    findings.append(f"{path}:{node.lineno}: {node.name} is {length} lines "
                                    f"(at most {MAX_FUNCTION_LINES})")
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for dotted in imported(name, path, node):
                own, outside = _own(dotted, mods), _third_party_floors(dotted)
                if own and own != name:
                    edges.setdefault(name, set()).add(own)
                    if layer(name) != "face" and layer(own) not in MAY_IMPORT[layer(name)] | {layer(name)}:
                        findings.append(f"{path}:{node.lineno}: {layer(name)} imports {own} "
                                        f"from {layer(own)}, against the layer order")
                if outside and layer(name) not in outside:
                    findings.append(f"{path}:{node.lineno}: {dotted} is imported in {layer(name)}; "
                                    f"only {' or '.join(sorted(outside))} may import it")
    return edges, findings


def cycles(edges):
    """The groups of modules that import each other, directly or round a loop (Tarjan)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return groups


def check(root):
    """Every broken house rule in the package folder `root`, one line each; [] when it keeps them."""
    edges, findings = _read(Path(root))
    return findings + [f"import cycle: {' -> '.join(group)}" for group in cycles(edges)]


if __name__ == "__main__":
    sys.setrecursionlimit(10_000)
    lines = check(Path(sys.argv[1] if len(sys.argv) > 1 else "gen"))
    print("\n".join(lines) or "the house rules hold")
    sys.exit(1 if lines else 0)
