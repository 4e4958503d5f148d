#!/usr/bin/env python3
"""What limits a variant: the compiler that made its cubin, ptxas resources, the SASS instruction mix,
and (with --ncu SIZE, on a GPU) Nsight Compute's bank conflicts, occupancy and DRAM throughput for
one launch.

With --ncu-report DIR as well, Nsight Compute's full set for that launch is kept as DIR/NAME.ncu-rep
and its details page as DIR/NAME.txt (throughputs, warp stall reasons, the tensor pipe's use).

Usage: scripts/inspect_variant.py NAME [NAME ...] [--ncu SIZE [--ncu-report DIR]]
Needs cuobjdump (and ncu for --ncu) from the CUDA toolkit.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections import Counter

from gen.compiling.compiler import CompileOptions, compile_variant
from gen.core.table import text_table
from gen.families import get_family, variant_from_name
from gen.gpu.process.jobs import Job
from gen.gpu.process.worker import once_command

NCU_METRICS = {
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "shared load bank conflicts",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": "shared store bank conflicts",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy %",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM throughput % of peak",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": "FMA pipe busy %",
}
WATCHED = ("FFMA", "LDS.128", "LDS", "STS", "LDG.E.128", "LDG.E", "STG.E.128", "STG.E", "BAR.SYNC")


def sass_mix(cubin: str) -> tuple[Counter, int]:
    """Counts of the watched opcodes (with their width suffix) and of all instructions."""
    sass = subprocess.run(["cuobjdump", "-sass", cubin], capture_output=True, text=True, check=True).stdout
    opcodes = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass)
    mix: Counter = Counter()
    for opcode in opcodes:
        base = opcode.split(".")[0]
        wide = ".128" in opcode
        if base in ("LDS", "LDG", "STG", "STS"):
            key = {"LDS": "LDS", "STS": "STS", "LDG": "LDG.E", "STG": "STG.E"}[base]
            mix[key + (".128" if wide else "")] += 1
        elif base in ("FFMA", "BAR"):
            mix["BAR.SYNC" if base == "BAR" else "FFMA"] += 1
    return mix, len(opcodes)


def launch_once(name: str, cubin: str, size: str) -> list[str]:
    """The command that runs the variant once at this size, in a process of its own (for ncu)."""
    return once_command(Job(name, variant_from_name(name).family, cubin, size, timing=None))


def ncu_metrics(name: str, cubin: str, size: str) -> dict[str, str]:
    command = ["ncu", "--metrics", ",".join(NCU_METRICS), "--kernel-name", name, "--csv", *launch_once(name, cubin, size)]
    output = subprocess.run(command, capture_output=True, text=True).stdout
    values = {}
    for line in output.splitlines():
        cells = [cell.strip('"') for cell in line.split('","')]
        if len(cells) > 3 and cells[-3] in NCU_METRICS:
            values[NCU_METRICS[cells[-3]]] = cells[-1].strip('"')
    return values


def ncu_report(name: str, cubin: str, size: str, folder: str) -> None:
    report = f"{folder}/{name}"
    subprocess.run(["ncu", "--set", "full", "-f", "-o", report, "--kernel-name", name, "-c", "1",
                    *launch_once(name, cubin, size)], capture_output=True, check=True)
    details = subprocess.run(["ncu", "--import", f"{report}.ncu-rep", "--page", "details"],
                             capture_output=True, text=True, check=True).stdout
    with open(f"{report}.txt", "w") as out:
        out.write(details)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--ncu", metavar="SIZE", help="also profile one launch at this size with Nsight Compute")
    parser.add_argument("--ncu-report", metavar="DIR", help="with --ncu: keep Nsight Compute's full report in DIR")
    args = parser.parse_args()
    if shutil.which("cuobjdump") is None:
        sys.exit("inspect_variant: cuobjdump not found: put the CUDA toolkit's bin/ on PATH")
    rows = []
    for name in args.names:
        variant = variant_from_name(name)
        get_family(variant.family)
        compiled = compile_variant(variant, CompileOptions(arch=args.arch))
        if not compiled.ok:
            print(f"{name}: compile error\n{compiled.log}")
            continue
        mix, total = sass_mix(str(compiled.cubin))
        r = compiled.resources
        rows.append([name, compiled.compiler, r.registers, r.spill_bytes, total, f"{mix['FFMA'] / total:.0%}"]
                    + [mix[op] for op in WATCHED])
        if args.ncu:
            for metric, value in ncu_metrics(name, str(compiled.cubin), args.ncu).items():
                print(f"{name} @ {args.ncu}: {metric} = {value}")
            if args.ncu_report:
                ncu_report(name, str(compiled.cubin), args.ncu, args.ncu_report)
    print(text_table(["variant", "compiler", "regs", "spill", "SASS", "FFMA share", *WATCHED], rows))


if __name__ == "__main__":
    main()
