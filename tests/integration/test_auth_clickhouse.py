#!/usr/bin/env python3
"""test_auth_clickhouse.py: projects and tokens over a ClickHouse store --
test_auth.py's whole test (the CLI, the matrix, two projects, a token made
and revoked while the server runs, the limit on failures) with the tokens
in the tokens table of a real clickhouse-server started here; then two
`sonde server --auth` on that one database: a token made once works on
both at once, and its revocation takes effect on both."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from clickhouse import ClickHouse  # noqa: E402
from server_test import Server  # noqa: E402
from sonde_test import SONDE, run, tmpdir, wait_until  # noqa: E402

ch = ClickHouse()
url = ch.url("auth")
os.environ["SONDE_TEST_STORE_ARGS"] = "--store " + url
import test_auth  # noqa: E402

test_auth.main()

servers = [Server(os.path.join(tmpdir(), "d"), ["--auth", "--store", url]) for _ in range(2)]
try:
    tok = test_auth.token(None, "gamma", "read")
    for k, srv in enumerate(servers):
        st, _, body = test_auth.Client(srv, test_auth.bearer(tok)).request("GET", "/api/v1/labels")
        test_auth.check(st == 200, "server %d doesn't take a token made on the database: %d %s"
                        % (k, st, body[:200]))
    tid = [i for i, r in test_auth.tokens_list(None).items() if r[1] == "gamma"][0]
    p = run([SONDE, "token", "revoke", "--store", url, tid])
    test_auth.check(p.returncode == 0, "revoke failed: %s" % p.stderr)
    t0 = time.time()
    for k, srv in enumerate(servers):
        wait_until(lambda: test_auth.Client(srv, test_auth.bearer(tok)).request(
            "GET", "/api/v1/labels")[0] == 401, 10, "server %d to refuse the revoked token" % k)
    print("ok: two servers on one ClickHouse took a token made once, and both refused it "
          "%.1f s after its revocation" % (time.time() - t0))
finally:
    for srv in servers:
        srv.stop()
    ch.stop()
