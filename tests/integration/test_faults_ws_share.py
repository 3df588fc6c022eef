#!/usr/bin/env python3
"""One client can't take every slot of the agent's WebSocket stream (issue
22, security probe finding 13): one address held all 64 for as long as it
liked, and every other client got 503. Now an address holds at most a
quarter of them (16 of 64): past it its handshakes are answered 503 saying
so, and the other addresses are still served.

`sonde agent --simulate`; from 127.0.0.2, 64 handshakes one after the
other, each kept open once upgraded: 16 are upgraded, the other 48
answered 503 naming the address's share; then a client from 127.0.0.3 is
upgraded and gets its snapshot; sonde_ws_refused_total{reason="address"}
counts the 48 and sonde_ws_clients the 17 connected. Closing the first
address's clients frees its share: it is upgraded again."""
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "metrics"))
from metrics_test import SimAgent, check, get  # noqa: E402

HANDSHAKE = (b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")


def handshake(port, source):
    """(status, head text, socket or None): the socket is kept open after
    a 101, closed otherwise."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    data = b""
    try:
        s.sendall(HANDSHAKE)
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError as e:
        s.close()
        return type(e).__name__, "", None
    head, _, rest = data.partition(b"\r\n\r\n")
    status = int(head.split()[1]) if head.startswith(b"HTTP/") else None
    if status == 101:
        return status, head.decode("latin-1"), (s, rest)
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    try:  # the 503's body
        while len(rest) < length:
            chunk = s.recv(4096)
            if not chunk:
                break
            rest += chunk
    except OSError:
        pass
    s.close()
    return status, (head + b"\r\n\r\n" + rest).decode("latin-1"), None


def first_frame(sock, rest, timeout=5):
    """The first WebSocket frame's opcode and payload length."""
    sock.settimeout(timeout)
    data = rest
    end = time.time() + timeout
    while len(data) < 2 and time.time() < end:
        data += sock.recv(65536)
    return data[0] & 0x0f, data[1] & 0x7f


def metric(port, name):
    body = get(port, "/metrics")[2].decode()
    return {l.split()[0]: float(l.split()[1]) for l in body.splitlines()
            if l.startswith(name)}


with SimAgent() as h:
    held, refused = [], []
    for i in range(64):
        st, head, kept = handshake(h.ws, "127.0.0.2")
        if st == 101:
            held.append(kept)
        else:
            refused.append((st, head))
    print("from 127.0.0.2: %d upgraded, %d refused; e.g. %r" % (len(held), len(refused),
                                                                 refused[:1]))
    check(len(held) == 16, "one address is upgraded 16 times (a quarter of the 64 slots): %d"
          % len(held))
    check(all(st == 503 and "127.0.0.2" in head and "16" in head for st, head in refused),
          "its other 48 handshakes are answered 503 naming the address and its share")
    st, head, kept = handshake(h.ws, "127.0.0.3")
    check(st == 101, "a client from another address is still upgraded: %s %s" % (st, head))
    op, n = first_frame(*kept)
    check(op == 1 and n > 0, "and gets its snapshot (a text frame of %d+ bytes)" % n)
    m = metric(h.http, "sonde_ws_")
    print(m)
    check(m.get('sonde_ws_refused_total{reason="address"}') == 48.0,
          "the 48 counted in sonde_ws_refused_total{reason=\"address\"}")
    check(m.get("sonde_ws_clients") == 17.0, "17 clients connected: %s"
          % m.get("sonde_ws_clients"))
    for s, _ in held:
        s.close()
    kept[0].close()
    deadline = time.time() + 10
    while time.time() < deadline and metric(h.http, "sonde_ws_clients").get(
            "sonde_ws_clients") != 0.0:
        time.sleep(0.1)
    st, head, again = handshake(h.ws, "127.0.0.2")
    check(st == 101, "once its clients are gone, the address is upgraded again: %s" % st)
    again[0].close()
