"""A real gRPC server for herd's tests: Python's grpcio serving testkit/py/arena.proto.

The stubs are not generated ahead of time: `grpc.protos_and_services` (grpcio-tools)
compiles the .proto when the server starts, so they never go stale against it.

Prints {"port": N} on stdout once it listens on 127.0.0.1. Then reads commands on stdin,
one a line, and answers each with one JSON line on stdout:
  counters        per method: calls, messages received and sent, statuses by code name
  reset           counters back to zero
  fail CODE N     the next N Join calls end with CODE (e.g. RESOURCE_EXHAUSTED)
At the end of stdin (the test process gone) it stops.

Metadata `herd-compress: gzip` on a call has its response messages gzip-compressed; with
--gzip, every call's are.
"""

import argparse
import json
import os
import sys
import threading
import time
from concurrent import futures

import grpc


class Counters:
    def __init__(self):
        self.lock = threading.Lock()
        self.methods = {}
        self.forced = []

    def reset(self):
        with self.lock:
            self.methods = {}
            self.forced = []

    def _m(self, method):
        return self.methods.setdefault(
            method, {"calls": 0, "received": 0, "sent": 0, "status": {}}
        )

    def add(self, method, key, n=1):
        with self.lock:
            self._m(method)[key] += n

    def status(self, method, code):
        with self.lock:
            s = self._m(method)["status"]
            s[code] = s.get(code, 0) + 1

    def take_forced(self):
        with self.lock:
            if self.forced and self.forced[0][1] > 0:
                code, n = self.forced[0]
                self.forced[0] = (code, n - 1)
                if n == 1:
                    self.forced.pop(0)
                return code
            return None

    def snapshot(self):
        with self.lock:
            return json.loads(json.dumps(self.methods))


COUNTERS = Counters()


def counted(method, streaming_in):
    """Wraps a handler: counts the call, its messages in and out, and how it ended."""

    def wrap(fn):
        def unary_out(self, request, context):
            COUNTERS.add(method, "calls")
            compress_if_asked(context)
            if streaming_in:
                request = counting(method, request)
            else:
                COUNTERS.add(method, "received")
            try:
                reply = fn(self, request, context)
            except Exception:
                COUNTERS.status(method, code_of(context))
                raise
            COUNTERS.add(method, "sent")
            COUNTERS.status(method, "OK")
            return reply

        def stream_out(self, request, context):
            COUNTERS.add(method, "calls")
            compress_if_asked(context)
            if streaming_in:
                request = counting(method, request)
            else:
                COUNTERS.add(method, "received")
            ended = "CANCELLED"
            try:
                for reply in fn(self, request, context):
                    yield reply
                    COUNTERS.add(method, "sent")
                ended = "OK"
            except GeneratorExit:
                # The call ended under the stream (the client cancelled or the deadline).
                ended = "CANCELLED" if not context.is_active() else "ABORTED"
                raise
            except Exception:
                ended = code_of(context)
                raise
            finally:
                COUNTERS.status(method, ended)

        return wrap_kind(fn, unary_out, stream_out)

    return wrap


def wrap_kind(fn, unary_out, stream_out):
    return stream_out if getattr(fn, "streams", False) else unary_out


def streams(fn):
    fn.streams = True
    return fn


def compress_if_asked(context):
    """Metadata `herd-compress: gzip` has this call's response messages gzip-compressed."""
    if ("herd-compress", "gzip") in context.invocation_metadata():
        context.set_compression(grpc.Compression.Gzip)


def counting(method, requests):
    for r in requests:
        COUNTERS.add(method, "received")
        yield r


def code_of(context):
    code = context.code()
    if code is None:
        return "UNKNOWN"
    if isinstance(code, grpc.StatusCode):
        return code.name
    return str(code)


def abort(context, code_name, message):
    code = getattr(grpc.StatusCode, code_name.upper(), None)
    if code is None:
        code = grpc.StatusCode.UNKNOWN
    context.set_code(code)
    context.abort(code, message)


def make_servicer(protos, services):
    class Arena(services.ArenaServicer):
        @counted("Join", streaming_in=False)
        def Join(self, request, context):
            fail = request.fail or COUNTERS.take_forced()
            if fail:
                abort(context, fail, request.fail_message)
            with COUNTERS.lock:
                seat = COUNTERS.methods["Join"]["calls"]
            return protos.JoinReply(
                player=request.player,
                seat=seat,
                team=request.team,
                tags=list(request.tags),
                profile=request.profile,
                level=request.level,
                token=request.token,
                total=sum(request.scores.values()),
            )

        @counted("Watch", streaming_in=False)
        @streams
        def Watch(self, request, context):
            pad = b"p" * max(request.pad_bytes, 0)
            for i in range(request.count):
                if request.fail and request.fail_after and i == request.fail_after:
                    abort(context, request.fail, "failed after %d events" % i)
                if i and request.interval_ms:
                    time.sleep(request.interval_ms / 1000)
                if not context.is_active():
                    return
                yield protos.Event(seq=i + 1, kind=request.kind, pad=pad)
            if request.fail and request.fail_after >= request.count:
                abort(context, request.fail, "failed after %d events" % request.count)

        @counted("Submit", streaming_in=True)
        def Submit(self, request_iterator, context):
            moves = total = 0
            for m in request_iterator:
                moves += 1
                total += m.seq
            return protos.Summary(moves=moves, total=total)

        @counted("Play", streaming_in=True)
        @streams
        def Play(self, request_iterator, context):
            for m in request_iterator:
                yield protos.Move(seq=m.seq, text="echo " + m.text)

        @counted("Slow", streaming_in=False)
        def Slow(self, request, context):
            until = time.monotonic() + request.delay_ms / 1000
            while time.monotonic() < until:
                if not context.is_active():
                    left = context.time_remaining()
                    expired = left is not None and left <= 0.001
                    context.set_code(
                        grpc.StatusCode.DEADLINE_EXCEEDED if expired else grpc.StatusCode.CANCELLED
                    )
                    raise RuntimeError("the call ended while it slept")
                time.sleep(0.005)
            return protos.JoinReply(player="slow")

    return Arena()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--proto", required=True, help="path to arena.proto")
    ap.add_argument("--gzip", action="store_true", help="compress every response with gzip")
    ap.add_argument("--workers", type=int, default=32)
    args = ap.parse_args()

    proto = os.path.abspath(args.proto)
    sys.path.insert(0, os.path.dirname(proto))
    protos, services = grpc.protos_and_services(os.path.basename(proto))

    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=args.workers),
        compression=grpc.Compression.Gzip if args.gzip else None,
    )
    services.add_ArenaServicer_to_server(make_servicer(protos, services), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(json.dumps({"port": port}), flush=True)

    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "counters":
            out = COUNTERS.snapshot()
        elif words[0] == "reset":
            COUNTERS.reset()
            out = {}
        elif words[0] == "fail" and len(words) == 3:
            with COUNTERS.lock:
                COUNTERS.forced.append((words[1], int(words[2])))
            out = {}
        else:
            out = {"error": "unknown command: " + line.strip()}
        print(json.dumps(out), flush=True)
    server.stop(0)


if __name__ == "__main__":
    main()
