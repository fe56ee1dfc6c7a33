#!/usr/bin/env python3
"""A stand-in for systemd's notification socket, for tests of Type=notify.

    notify_socket.py SOCKET LOG [MOUNTPOINT]

Binds an AF_UNIX datagram socket at SOCKET and appends one line to LOG per message received:
its fields joined by " | ", and, with MOUNTPOINT, "[mounted]" or "[not mounted]" as the mount
table stood when the message arrived. Runs until SIGTERM, or for 10 minutes.
"""
import os
import signal
import socket
import sys
import time


def mounted(path):
    with open("/proc/self/mountinfo", "rb") as f:
        return any(line.split(b" ")[4] == path.encode() for line in f if len(line.split(b" ")) > 4)


def main():
    path, log = sys.argv[1], sys.argv[2]
    mountpoint = sys.argv[3] if len(sys.argv) > 3 else None
    # A Swift test process starts this with signals blocked: SIGTERM must get through.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # Not PR_SET_PDEATHSIG: it fires when the thread that started this ends, and a test's
    # threads come and go. A test killed before it could stop this leaves it 10 minutes at most.
    deadline = time.monotonic() + 600
    if os.path.exists(path):
        os.unlink(path)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    s.settimeout(5)
    with open(log, "a", buffering=1) as out:
        while time.monotonic() < deadline:
            try:
                data = s.recv(65536).decode("utf-8", "replace")
            except socket.timeout:
                continue
            line = " | ".join(f for f in data.split("\n") if f)
            if mountpoint:
                line += " [mounted]" if mounted(mountpoint) else " [not mounted]"
            out.write(line + "\n")


if __name__ == "__main__":
    main()
