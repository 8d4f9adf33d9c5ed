"""A real WebSocket server for herd's tests: Python's `websockets` (asyncio).

Prints {"port": N} on stdout once it listens on 127.0.0.1 (ws://, or wss:// with --cert
and --key). The path picks the behaviour:
  /echo                    every message sent back as it came (text or binary)
  /push?count=N&rate=R&types=a,b&fragments=K&hold=1
                           N JSON text events {"type": t, "seq": i}, types in turn, R a
                           second (0: at once), each in K fragments; then a Close 1000
                           (or, with hold=1, the socket held open, echoing)
  /drop?after=N            echoes N messages, then drops the TCP connection without a Close
  /close?code=C&reason=S&after=N
                           echoes N messages, then closes with code C and reason S
  /ping?count=N            sends N pings, each after the last one's pong; then text
                           "pongs N" and a Close 1000
  /forbidden               refuses the upgrade with 403
The subprotocol `herd.v1` is chosen when offered; none otherwise.

Then reads commands on stdin, one a line, each answered with one JSON line on stdout:
  counters   per mode (the path without its query): connections, messages received and
             sent, pings sent and pongs received, drops, Close codes sent and received
  reset      counters back to zero
At the end of stdin (the test process gone) it stops.
"""

import argparse
import asyncio
import json
import logging
import os
import ssl
import sys
import threading
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Response
from websockets.datastructures import Headers

COUNTERS = {}
LOCK = threading.Lock()


def count(mode, key, n=1, sub=None):
    with LOCK:
        c = COUNTERS.setdefault(
            mode,
            {
                "connections": 0,
                "received": 0,
                "sent": 0,
                "pings": 0,
                "pongs": 0,
                "drops": 0,
                "close_sent": {},
                "close_received": {},
            },
        )
        if sub is None:
            c[key] += n
        else:
            c[key][sub] = c[key].get(sub, 0) + n


def select_subprotocol(connection, offered):
    return "herd.v1" if "herd.v1" in offered else None


def process_request(connection, request):
    if urlsplit(request.path).path == "/forbidden":
        return Response(403, "Forbidden", Headers(), b"not here\n")
    return None


async def echo(ws, mode, n=None):
    """Echoes messages: all of them, or `n`."""
    done = 0
    while n is None or done < n:
        msg = await ws.recv()
        count(mode, "received")
        await ws.send(msg)
        count(mode, "sent")
        done += 1


async def handler(ws):
    url = urlsplit(ws.request.path)
    mode = url.path.strip("/") or "echo"
    q = {k: v[-1] for k, v in parse_qs(url.query).items()}
    count(mode, "connections")
    try:
        if mode == "echo":
            await echo(ws, mode)
        elif mode == "push":
            n = int(q.get("count", "10"))
            rate = float(q.get("rate", "0"))
            types = q.get("types", "tick").split(",")
            fragments = int(q.get("fragments", "1"))
            for i in range(n):
                event = json.dumps({"type": types[i % len(types)], "seq": i + 1})
                if fragments > 1:
                    size = -(-len(event) // fragments)
                    await ws.send([event[j : j + size] for j in range(0, len(event), size)])
                else:
                    await ws.send(event)
                count(mode, "sent")
                if rate > 0:
                    await asyncio.sleep(1 / rate)
            if q.get("hold") == "1":
                await echo(ws, mode)
            else:
                count(mode, "close_sent", sub="1000")
                await ws.close(1000, "done")
        elif mode == "drop":
            await echo(ws, mode, int(q.get("after", "0")))
            count(mode, "drops")
            ws.transport.abort()
        elif mode == "close":
            await echo(ws, mode, int(q.get("after", "0")))
            code = q.get("code", "1000")
            count(mode, "close_sent", sub=code)
            await ws.close(int(code), q.get("reason", ""))
        elif mode == "ping":
            for i in range(int(q.get("count", "1"))):
                waiter = await ws.ping(b"p%d" % i)
                count(mode, "pings")
                await asyncio.wait_for(waiter, 10)
                count(mode, "pongs")
            await ws.send("pongs %d" % int(q.get("count", "1")))
            count(mode, "sent")
            count(mode, "close_sent", sub="1000")
            await ws.close(1000, "done")
        else:
            count(mode, "close_sent", sub="4404")
            await ws.close(4404, "no mode " + mode)
    except ConnectionClosed:
        pass
    finally:
        if mode != "drop":
            await ws.wait_closed()
            rcvd = ws.protocol.close_rcvd
            count(mode, "close_received", sub=str(rcvd.code) if rcvd else "none")


async def serve_forever(ready, tls):
    async with serve(
        handler,
        "127.0.0.1",
        0,
        ssl=tls,
        select_subprotocol=select_subprotocol,
        process_request=process_request,
        ping_interval=None,
        compression=None,
    ) as server:
        port = server.sockets[0].getsockname()[1]
        ready(port)
        await asyncio.get_running_loop().run_in_executor(None, control)
        # The test process is gone: no closing handshakes with clients that may be gone too.
        os._exit(0)


def control():
    for line in sys.stdin:
        word = line.strip()
        if word == "counters":
            with LOCK:
                out = json.loads(json.dumps(COUNTERS))
        elif word == "reset":
            with LOCK:
                COUNTERS.clear()
            out = {}
        elif not word:
            continue
        else:
            out = {"error": "unknown command: " + word}
        print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cert", help="serve wss:// with this certificate (PEM)")
    ap.add_argument("--key", help="and this key (PEM)")
    args = ap.parse_args()
    tls = None
    if args.cert:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(args.cert, args.key)
    logging.basicConfig(level=logging.CRITICAL)
    ready = lambda port: print(json.dumps({"port": port}), flush=True)
    asyncio.run(serve_forever(ready, tls))


if __name__ == "__main__":
    main()
