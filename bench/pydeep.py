"""pydeep.py: pure-Python CPU work at a known Python stack depth, for
bench/unwind.sh. `pydeep.py DEPTH UNITS` runs UNITS units of work, each at
the bottom of DEPTH Python frames: <module>, main, then DEPTH - 2 calls of
the recursive function down() (DEPTH >= 3), the last of which spins in a
loop of integer arithmetic (about 1 ms a unit on a 2026 EPYC). Fixed work,
so its wall time measures what a profiler takes from it. UNITS 0 runs
until killed."""
import sys


def down(n, work):
    if n > 1:
        return down(n - 1, work)
    x = 0
    for i in range(work):
        x += i * i
    return x


def main(depth, units):
    n = 0
    while units == 0 or n < units:
        down(depth - 2, 20000)
        n += 1


if __name__ == "__main__":
    main(max(3, int(sys.argv[1])), int(sys.argv[2]))
