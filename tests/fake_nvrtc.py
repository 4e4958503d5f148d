"""A stand-in for NVRTC's worker process (`Nvrtc(worker="tests.fake_nvrtc")`): it says on the FIFO
$TILEGEN_TEST_ANNOUNCE that it is compiling, then does what $TILEGEN_TEST_NVRTC says: `hang` (until
it is killed) or `crash` (SIGSEGV, as a crash inside NVRTC would)."""

from __future__ import annotations

import os
import signal
import sys
from multiprocessing.connection import Connection

from gen.core.processes import child_connection

ANNOUNCE_ENV, BEHAVIOUR_ENV = "TILEGEN_TEST_ANNOUNCE", "TILEGEN_TEST_NVRTC"


def serve(connection: Connection) -> None:
    name, _, _ = connection.recv()
    fd = os.open(os.environ[ANNOUNCE_ENV], os.O_WRONLY)
    os.write(fd, f"compiling {name} in {os.getpid()}\n".encode())
    os.close(fd)
    if os.environ[BEHAVIOUR_ENV] == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    while True:
        signal.pause()


if __name__ == "__main__":
    serve(child_connection(int(sys.argv[1])))  # as the real worker starts
