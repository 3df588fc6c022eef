#!/usr/bin/env python3
"""The store conformance suite against ClickHouse: tests/unit/test_store.c's
conformance group -- round trips through every read, deduplication, keyed
puts, matchers, time ranges, totals, points, all-or-nothing puts, expiry
as reads see it, function sources, threads putting, selecting and expiring
at once, and kill -9 in the middle of puts -- run against a real
clickhouse-server started here (the SQLite store runs the same tests in
unit/test_store). Each test gets a fresh database."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from clickhouse import ClickHouse  # noqa: E402
from sonde_test import B, check, run, skip  # noqa: E402

binary = os.path.join(B, "tests", "test_store")
if not os.access(binary, os.X_OK):
    skip("build/tests/test_store is not built")
ch = ClickHouse()
env = dict(os.environ, SONDE_TEST_STORE="clickhouse://127.0.0.1:%d" % ch.http)
p = run([binary], timeout=600, env=env)
out = p.stdout + p.stderr
check("test_crash" in out and "test_damaged_row" not in out,
      "the conformance group ran (not the SQLite store's own tests)")
check(p.returncode == 0, "every conformance test passed against ClickHouse")
ch.stop()
