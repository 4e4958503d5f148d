"""The NVRTC compile worker: a process of its own (`python -m gen.compiling.nvrtc_process FD`) that
compiles programs it is sent over the socket FD, one at a time, until the socket closes. A crash
or a hang of NVRTC ends this process, never tilegen (gen.compiling.nvrtc says what to do then)."""

from __future__ import annotations

import signal
import sys
from multiprocessing.connection import Connection

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
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only tilegen stops its workers
    serve(Connection(int(sys.argv[1])))
