"""shares.py: pure-Python CPU in known shares -- alpha 50 %, beta 30 %,
gamma 20 % of the thread's CPU time, each through spin -- for SECONDS
(default 3), in rounds of random length, with the chain
<module> -> run -> alpha|beta|gamma -> spin. THREADS > 1 runs the same in
that many threads. The ground truth of the Python stack tests."""
import random
import sys
import threading
import time


def spin(seconds):
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for i in range(500):
            x += i * i
    return x


def alpha(r):
    spin(r * 0.5)


def beta(r):
    spin(r * 0.3)


def gamma(r):
    spin(r * 0.2)


def run(seconds):
    rng = random.Random(1)
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        r = rng.uniform(0.005, 0.015)
        alpha(r)
        beta(r)
        gamma(r)


if __name__ == "__main__":
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    nthreads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    threads = [threading.Thread(target=run, args=(secs,)) for _ in range(nthreads - 1)]
    for t in threads:
        t.start()
    run(secs)
    for t in threads:
        t.join()
