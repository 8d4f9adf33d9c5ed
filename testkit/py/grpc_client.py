"""The reference client of `cargo xtask bench-players`: N unary calls to herd.arena.Arena/Join
with Python's grpcio, over C threads, each with a channel (an HTTP/2 connection) of its own
and calling back to back, as herd's players do with -c C. Stubs are compiled from the
.proto at start (grpc.protos_and_services), as the server's are.

Prints {"calls": N, "ok": K, "seconds": S} when done.
"""

import argparse
import json
import os
import sys
import threading
import time

import grpc


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--proto", required=True)
    ap.add_argument("--target", required=True, help="host:port")
    ap.add_argument("-n", type=int, required=True, help="calls in total")
    ap.add_argument("-c", type=int, required=True, help="threads, each its own channel")
    args = ap.parse_args()
    proto = os.path.abspath(args.proto)
    sys.path.insert(0, os.path.dirname(proto))
    protos, services = grpc.protos_and_services(os.path.basename(proto))

    ok = [0] * args.c
    per = [args.n // args.c + (1 if i < args.n % args.c else 0) for i in range(args.c)]

    def worker(i):
        # A channel per thread: grpcio shares subchannels between channels with the same
        # arguments unless told not to.
        channel = grpc.insecure_channel(args.target, options=[("grpc.use_local_subchannel_pool", 1)])
        stub = services.ArenaStub(channel)
        request = protos.JoinRequest(player="bench", level=2)
        for _ in range(per[i]):
            stub.Join(request)
            ok[i] += 1
        channel.close()

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.c)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"calls": args.n, "ok": sum(ok), "seconds": time.monotonic() - started}))


if __name__ == "__main__":
    main()
