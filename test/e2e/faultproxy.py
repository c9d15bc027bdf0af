#!/usr/bin/env python3
"""A TCP fault proxy for test/e2e/faults.sh (python3 standard library only).

  faultproxy.py --listen 127.0.0.1:0 --upstream 127.0.0.1:6443 [--upstream ...] [--control FILE] [--port-file F]

Accepts connections on --listen and forwards their bytes to --upstream and
back, unchanged: it is not an API server and does not look into the stream
(TLS passes through end to end, so the client still checks the API server's
certificate). Three faults:

  cut     SIGUSR1: every open connection is closed at once, both sides, with
          a TCP reset (SO_LINGER 0), as a broken network or a restarted load
          balancer would; new connections are accepted as before.
  delay   the control FILE, read every 0.1 s, holds "delay SECONDS [WAY]"
          (or is empty/absent: no delay). Each chunk read from a side that
          WAY names (both, the default; up: client to server, the requests;
          down: server to client, the answers) is sent on SECONDS after it
          arrived (latency, not bandwidth: chunks in flight overlap), in
          order. A chunk keeps the due time it got when it arrived, so
          lowering the delay takes effect for new chunks. With "down" only,
          a request reaches the server at once and its answer waits: a cut
          then loses answers to requests that were carried out.
  stall   SIGUSR2: every open connection goes silent, both ways, and stays
          open: its bytes are swallowed, as on a half-open connection (a
          peer gone without a FIN, a NAT that forgot it). A watch on it
          then sees nothing, not even bookmarks; new connections work.

With several --upstream, each new connection goes to the next one in turn,
as a Service in front of replicas spreads connections (bench/e2e.sh
--replicas puts two extenders behind it).

Writes the port it listens on to --port-file (and stdout), and one line per
event to stdout: "accepted N", "cut N connections", "delay S".
"""
import argparse
import collections
import os
import signal
import socket
import struct
import sys
import threading
import time

LOCK = threading.Lock()
CONNS = set()          # open Pipe objects
DELAY = {"up": 0.0, "down": 0.0}
CUT_REQUESTED = threading.Event()
STALL_REQUESTED = threading.Event()


SAY = threading.Lock()


def say(msg):
    """One whole line per event, whichever thread says it."""
    with SAY:
        sys.stdout.write("%.3f %s\n" % (time.time(), msg))
        sys.stdout.flush()


def quiet_close(s, how=socket.SHUT_RDWR):
    """Shuts the socket down (waking its reader blocked in recv()) and closes it, errors ignored."""
    try:
        s.shutdown(how)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass


def hard_close(s):
    """Closes with a reset, not a FIN: the peer sees ECONNRESET."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    # (Linux sends nothing for SHUT_RD: only the reset goes out, at close.)
    quiet_close(s, socket.SHUT_RD)


class Pipe:
    """One client connection and its upstream connection: two directions, each a
    reader thread (stamps chunks with their due time) and a writer thread."""

    def __init__(self, client, upstream):
        self.client, self.upstream = client, upstream
        self.closed = False
        self.stalled = False
        self.done = 0
        self.lock = threading.Lock()

    def start(self):
        for src, dst, way in ((self.client, self.upstream, "up"), (self.upstream, self.client, "down")):
            q = collections.deque()
            cv = threading.Condition()
            threading.Thread(target=self.reader, args=(src, q, cv, way), daemon=True).start()
            threading.Thread(target=self.writer, args=(dst, q, cv), daemon=True).start()

    def reader(self, src, q, cv, way):
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = None
            due = time.monotonic() + DELAY[way]
            with cv:
                q.append((due, data if data else None))
                cv.notify()
            if not data:
                return

    def writer(self, dst, q, cv):
        while True:
            with cv:
                while not q:
                    cv.wait()
                due, data = q.popleft()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if self.closed:
                return
            if self.stalled:
                if data is None:      # the peer gave up: let the other side go too
                    self.close(hard=False)
                    return
                continue              # swallowed
            if data is None:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                self.finish()
                return
            try:
                dst.sendall(data)
            except OSError:
                self.cut()
                return

    def finish(self):
        with self.lock:
            self.done += 1
            last = self.done == 2
        if last:
            self.close(hard=False)

    def close(self, hard):
        with self.lock:
            if self.closed:
                return
            self.closed = True
        for s in (self.client, self.upstream):
            if hard:
                hard_close(s)
            else:
                quiet_close(s)
        with LOCK:
            CONNS.discard(self)

    def cut(self):
        self.close(hard=True)


def control_loop(path):
    last = None
    while True:
        if CUT_REQUESTED.is_set():
            CUT_REQUESTED.clear()
            with LOCK:
                victims = list(CONNS)
            for p in victims:
                p.cut()
            say("cut %d connections" % len(victims))
        if STALL_REQUESTED.is_set():
            STALL_REQUESTED.clear()
            with LOCK:
                victims = list(CONNS)
            for p in victims:
                p.stalled = True
            say("stalled %d connections" % len(victims))
        try:
            with open(path) as f:
                text = f.read().split()
        except OSError:
            text = []
        delay, way = 0.0, "both"
        if len(text) >= 2 and text[0] == "delay":
            try:
                delay = max(0.0, float(text[1]))
            except ValueError:
                pass
            if len(text) >= 3 and text[2] in ("up", "down", "both"):
                way = text[2]
        if (delay, way) != last:
            DELAY["up"] = delay if way in ("up", "both") else 0.0
            DELAY["down"] = delay if way in ("down", "both") else 0.0
            last = (delay, way)
            say("delay %g %s" % (delay, way))
        time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", default="127.0.0.1:0")
    ap.add_argument("--upstream", required=True, action="append")
    ap.add_argument("--control")
    ap.add_argument("--port-file")
    a = ap.parse_args()
    lhost, lport = a.listen.rsplit(":", 1)
    upstreams = [u.rsplit(":", 1) for u in a.upstream]
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((lhost, int(lport)))
    ls.listen(256)
    port = ls.getsockname()[1]
    if a.port_file:
        tmp = a.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % port)
        os.rename(tmp, a.port_file)
    say("listening %s:%d upstream %s" % (lhost, port, ",".join(a.upstream)))
    # The signal only sets a flag: the control thread does the cutting.
    signal.signal(signal.SIGUSR1, lambda *_: CUT_REQUESTED.set())
    signal.signal(signal.SIGUSR2, lambda *_: STALL_REQUESTED.set())
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if a.control:
        threading.Thread(target=control_loop, args=(a.control,), daemon=True).start()
    n = 0
    while True:
        try:
            c, _ = ls.accept()
        except InterruptedError:
            continue
        try:
            uhost, uport = upstreams[n % len(upstreams)]
            u = socket.create_connection((uhost, int(uport)), timeout=10)
            u.settimeout(None)
        except OSError as e:
            say("upstream refused: %s" % e)
            hard_close(c)
            continue
        for s in (c, u):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        p = Pipe(c, u)
        with LOCK:
            CONNS.add(p)
        n += 1
        say("accepted %d" % n)
        p.start()


if __name__ == "__main__":
    main()
