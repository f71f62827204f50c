#!/usr/bin/env python3
"""A delay line for netlab on kernels without netem.

    python3 delay-line.py <tun device> <delay ms>

Creates the TUN device (it lives as long as this process), prints "ready", then holds every packet
it reads from the device for <delay ms> and writes it back, in order. The lab routes a host's
outgoing packets into the device; written back, they leave through the host's shaped interface.
Node.js cannot open a TUN device (it has no ioctl), hence this helper, standard library only.
"""
import fcntl
import heapq
import os
import select
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000


def main() -> None:
    name, delay = sys.argv[1], float(sys.argv[2]) / 1000
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    print("ready", flush=True)
    queue: list = []
    sequence = 0
    while True:
        timeout = max(0.0, queue[0][0] - time.monotonic()) if queue else None
        readable, _, _ = select.select([fd], [], [], timeout)
        if readable:
            packet = os.read(fd, 65535)
            heapq.heappush(queue, (time.monotonic() + delay, sequence, packet))
            sequence += 1
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            os.write(fd, heapq.heappop(queue)[2])


if __name__ == "__main__":
    main()
