#!/usr/bin/env python3
"""The rooms of src/ include each other downwards only: fails naming each
file and include by which a room reaches a room of its own tier or above.

The order, lowest first (README's Layout lists the rooms in it). A room may
include its own headers and those of the rooms in the tiers below; rooms
of one tier don't include each other.

  common                     one of each primitive
  profile, net, cupti        the profile model; sockets and HTTP; the CUPTI
                             library (a .so of its own: header-only common/)
  symbolize, store, metrics  ELF, maps and the symbolizer; the stores; GPU
                             metrics
  python, auth, alerts       CPython (through symbolize's ELF and maps
                             readers); tokens (kept by the store); alerts
  unwind, server             unwind tables and the Python walker's layout;
                             the HTTP API
  probe, coord               the BPF room issue 25 is making (not in the
                             tree yet); the coordinator
  agent                      the node daemon
  cli                        main.c and the subcommands

A room is a folder of src/ with all below it. An include is
`#include "ROOM/FILE"`; a bare `#include "FILE"` is the
room's own when FILE is beside the includer, else a header of bpf/ or
build/include/ (no room). Run from `make test` (tests/run.sh).
"""
import os
import re
import sys

LAYERS = [
    ["common"],
    ["profile", "net", "cupti"],
    ["symbolize", "store", "metrics"],
    ["python", "auth", "alerts"],
    ["unwind", "server"],
    ["probe", "coord"],
    ["agent"],
    ["cli"],
]

# Arrows that run the wrong way and stay for now: (file, included header,
# why). Each is a debt with its reason; none is left today.
ALLOWED = [
]

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    src = os.path.join(root, "src")
    tier = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}
    allowed = {(f, h) for f, h, _ in ALLOWED}
    problems, checked = [], 0

    for room in sorted(os.listdir(src)):
        if not os.path.isdir(os.path.join(src, room)):
            continue
        if room not in tier:
            problems.append(f"src/{room}/: a room the layer order does not place -- add it "
                            f"to LAYERS in tests/integration/test_layers.py and to the "
                            f"README's Layout")
            continue
        files = sorted(os.path.join(d, n)
                       for d, _, names in os.walk(os.path.join(src, room))
                       for n in names if n.endswith((".c", ".h")))
        for path in files:
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
            checked += 1
            for lineno, line in enumerate(lines, 1):
                m = INCLUDE.match(line)
                if not m or "/" not in m.group(1):
                    continue
                target = m.group(1).split("/")[0]
                if target == room or not os.path.isdir(os.path.join(src, target)):
                    continue
                if target not in tier:
                    continue  # reported once above, as a room without a place
                if tier[target] < tier[room] or (rel, m.group(1)) in allowed:
                    continue
                where = "its own tier" if tier[target] == tier[room] else "a higher tier"
                problems.append(f"{rel}:{lineno}: #include \"{m.group(1)}\" -- {room} "
                                f"(tier {tier[room]}) reaches {target}, {where} "
                                f"(tier {tier[target]})")

    for f, h, _ in ALLOWED:
        if not os.path.exists(os.path.join(root, f)):
            problems.append(f"ALLOWED names {f}, which is gone: drop its entry")

    if problems:
        print("FAIL: includes against the layer order (lowest first: "
              + " < ".join("/".join(t) for t in LAYERS) + "):")
        for p in problems:
            print("  " + p)
        return 1
    print(f"ok: {checked} files of src/ include only their own room and lower tiers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
