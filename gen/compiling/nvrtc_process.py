"""The NVRTC compile worker: a process of its own (`python -m gen.compiling.nvrtc_process FD`) that
compiles programs it is sent over the socket FD, one at a time, until the socket closes (at once, even
mid-compile: tilegen has ended). A crash or a hang of NVRTC ends this process, never tilegen
(gen.compiling.nvrtc says what to do then)."""

from __future__ import annotations

import sys
from multiprocessing.connection import Connection

from ..core.processes import child_connection
from .nvrtc_library import compile_program


def serve(connection: Connection) -> None:
    """(name, source, options) in, nvrtc_library.Program out, until the other end closes."""
    while True:
        try:
            name, source, options = connection.recv()
        except EOFError:
            return
        connection.send(compile_program(name, source, options))


if __name__ == "__main__":
    serve(child_connection(int(sys.argv[1])))
