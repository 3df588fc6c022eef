#!/usr/bin/env python3
"""sonde server and sonde coordinator over HTTPS and mutual TLS, and their
clients (the agent's shipper, the coordinator's fan-out) with --ca, --cert
and --key, on certificates made here with the openssl command: a CA, a
server certificate for 127.0.0.1 (subjectAltName IP:127.0.0.1), a client
certificate of that CA, and another CA with a client certificate of its own.

Checked: a server with --tls-cert/--tls-key answers /healthz to a client
that trusts the CA, and fails the verification of one that doesn't; it
takes TLS 1.2 and 1.3 handshakes, not 1.0 or 1.1; with
--tls-client-ca a good client certificate is answered, none and one of the
other CA get 403 (and what they post is not stored); plain HTTP to a TLS
port gets no HTTP answer and the server goes on; a coordinator serving
HTTPS over a mutual-TLS server with --ca/--cert/--key merges its answer
exactly, and without --cert the server refuses it; bad files (missing,
not PEM, a key not the certificate's, a certificate where the key goes, an
encrypted key) make server, coordinator and agent exit 1 with a message
naming the file. Last, an agent ships a workload's CPU profile over mutual
TLS and a query finds it (skipped without BPF, after the rest passed); an
agent without --cert has its windows refused."""
import http.client
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
from agent_test import Agent, value  # noqa: E402
from server_test import Server, error_of  # noqa: E402
from sonde_test import SONDE, WL, check, fail, run, skip, tmpdir, wait_until  # noqa: E402

if not shutil.which("openssl"):
    skip("no openssl command to make the test's certificates (Debian: openssl)")
if not os.path.exists(SONDE):
    skip("sonde is not built yet")

D = tmpdir()


def pki_path(name):
    return os.path.join(D, name)


def openssl(*args):
    p = subprocess.run(["openssl"] + list(args), capture_output=True, text=True, cwd=D)
    if p.returncode != 0:
        fail("openssl %s: %s" % (" ".join(args), p.stderr[-2000:]))


def make_key(name):
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out",
            name + ".key")


def make_ca(name):
    make_key(name)
    openssl("req", "-x509", "-new", "-key", name + ".key", "-subj", "/CN=sonde test " + name,
            "-days", "2", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", name + ".pem")


def make_cert(name, ca, cn, ext):
    make_key(name)
    openssl("req", "-new", "-key", name + ".key", "-subj", "/CN=" + cn, "-out", name + ".csr")
    with open(pki_path(name + ".ext"), "w") as f:
        f.write(ext)
    openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
            "-CAcreateserial", "-days", "2", "-extfile", name + ".ext", "-out", name + ".pem")


make_ca("ca")
make_ca("other")
make_cert("server", "ca", "127.0.0.1",
          "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
make_cert("client", "ca", "agent-1", "extendedKeyUsage=clientAuth\n")
make_cert("intruder", "other", "agent-2", "extendedKeyUsage=clientAuth\n")
CA, SRV_CERT, SRV_KEY = pki_path("ca.pem"), pki_path("server.pem"), pki_path("server.key")
CLI_CERT, CLI_KEY = pki_path("client.pem"), pki_path("client.key")
SERVE_TLS = ["--tls-cert", SRV_CERT, "--tls-key", SRV_KEY]
CLIENT_TLS = ["--ca", CA, "--cert", CLI_CERT, "--key", CLI_KEY]


def context(cert=None):
    """A client's TLS context: trusts the test's CA, presents cert (a name
    made above) when given."""
    ctx = ssl.create_default_context(cafile=CA)
    if cert:
        ctx.load_cert_chain(pki_path(cert + ".pem"), pki_path(cert + ".key"))
    return ctx


GOOD, NO_CERT, OTHER_CA = context("client"), context(), context("intruder")


class TLSServer(Server):
    """A sonde server or coordinator serving HTTPS, with Server's helpers;
    its requests go over TLS with self.ctx (or the ctx given). Server's own
    start waits for 'listening on http://', so the start is here."""

    def __init__(self, cmd, ctx, what="the server"):
        self.ctx = ctx
        self.lines = []
        print("$ " + " ".join(cmd))
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, start_new_session=True)
        found = []

        def pump():
            for line in self.p.stdout:
                self.lines.append(line.rstrip("\n"))
                m = re.search(r"listening on https://[^ ]*:(\d+)/", line)
                if m and not found:
                    found.append(int(m.group(1)))
        threading.Thread(target=pump, daemon=True).start()
        wait_until(lambda: found or self.p.poll() is not None, 20,
                   "%s to say where it listens" % what)
        if not found:
            fail("%s did not start: %s" % (what, "\n".join(self.lines[-10:])))
        self.port = found[0]

    def request(self, method, path, body=None, headers=None, timeout=60, ctx=None):
        c = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=timeout,
                                        context=ctx or self.ctx)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            c.close()


def no_http_answer(srv, what):
    """Plain HTTP to srv's TLS port: the connection ends (within the
    deadline) without a byte of HTTP."""
    t0 = time.time()
    out = srv.raw(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", timeout=20)
    check(not out.startswith(b"HTTP/") and b"HTTP/1." not in out and b"ok" not in out,
          "%s: plain HTTP gets no HTTP answer (%d bytes back, closed after %.1f s)"
          % (what, len(out), time.time() - t0))


def refused(srv, ctx, want, what):
    st, _, body = srv.request("GET", "/healthz", ctx=ctx)
    check(st == 403 and want in error_of(body),
          "%s: refused with 403 (%s)" % (what, error_of(body) or body[:200]))


def exits_naming(cmd, rc, words, what):
    p = run(cmd, timeout=60)
    out = p.stdout + p.stderr
    check(p.returncode == rc and all(w in out for w in words),
          "%s: exit %d (want %d), the message names %s" % (what, p.returncode, rc, words))


# --- bad files: the command exits with a message naming the file ---------------
with open(pki_path("garbage.pem"), "w") as f:
    f.write("this is no certificate\n")
openssl("pkey", "-in", "client.key", "-aes256", "-passout", "pass:secret", "-out", "enc.key")
data = os.path.join(D, "data-bad")
missing = pki_path("missing.pem")
for args, words, what in [
        (["--tls-cert", missing, "--tls-key", SRV_KEY], [missing, "No such file"],
         "a missing --tls-cert"),
        (["--tls-cert", pki_path("garbage.pem"), "--tls-key", SRV_KEY],
         [pki_path("garbage.pem"), "not PEM"], "a --tls-cert of garbage"),
        (["--tls-cert", SRV_CERT, "--tls-key", CLI_KEY],
         [CLI_KEY, "is not the key of the certificate"], "a key not the certificate's"),
        (["--tls-cert", SRV_KEY, "--tls-key", SRV_CERT],
         [SRV_KEY, "a private key, not a certificate"], "certificate and key swapped"),
        (["--tls-cert", SRV_CERT, "--tls-key", pki_path("enc.key")],
         [pki_path("enc.key"), "encrypted"], "an encrypted key"),
        (SERVE_TLS + ["--tls-client-ca", pki_path("garbage.pem")],
         [pki_path("garbage.pem"), "--tls-client-ca"], "a --tls-client-ca of garbage")]:
    exits_naming([SONDE, "server", "--listen", "127.0.0.1:0", "--data", data] + args, 1,
                 words, "sonde server with " + what)
check(not os.path.exists(data), "no store was opened for a server with bad TLS files")
exits_naming([SONDE, "server", "--listen", "127.0.0.1:0", "--data", data,
              "--tls-key", SRV_KEY], 2, ["--tls-key needs --tls-cert"],
             "sonde server with --tls-key alone")
exits_naming([SONDE, "coordinator", "--listen", "127.0.0.1:0",
              "--server", "https://127.0.0.1:1", "--ca", CA, "--cert", pki_path("garbage.pem"),
              "--key", CLI_KEY], 1, [pki_path("garbage.pem"), "--cert"],
             "sonde coordinator with a --cert of garbage")
exits_naming([SONDE, "coordinator", "--listen", "127.0.0.1:0", "--server",
              "http://127.0.0.1:1", "--tls-cert", missing, "--tls-key", SRV_KEY], 1,
             [missing, "No such file"], "sonde coordinator with a missing --tls-cert")
exits_naming([SONDE, "agent", "--server", "https://127.0.0.1:1", "--ca", missing], 1,
             [missing, "--ca"], "sonde agent with a missing --ca")
exits_naming([SONDE, "agent", "--server", "http://127.0.0.1:1", "--ca", CA], 2,
             ["https://"], "sonde agent with --ca for an http:// server")

# --- HTTPS ----------------------------------------------------------------------
srv = TLSServer([SONDE, "server", "--listen", "127.0.0.1:0", "--data",
                 os.path.join(D, "data-tls")] + SERVE_TLS, NO_CERT)
try:
    st, _, body = srv.request("GET", "/healthz")
    check(st == 200, "HTTPS: /healthz answers a client that trusts the CA (%d)" % st)
    try:
        srv.request("GET", "/healthz", ctx=ssl.create_default_context())
        fail("HTTPS: a client with only the system's CAs accepted the test CA's certificate")
    except ssl.SSLCertVerificationError as e:
        check(True, "HTTPS: a client with only the system's CAs refuses the server (%s)"
              % e.verify_message)
    no_http_answer(srv, "HTTPS")
    # OpenSSL's own client, its security level lowered so that it offers
    # the old versions at all: the server takes TLS 1.2 and 1.3 alone.
    for ver, ok in (("-tls1", False), ("-tls1_1", False), ("-tls1_2", True), ("-tls1_3", True)):
        p = subprocess.run(["openssl", "s_client", "-connect", "127.0.0.1:%d" % srv.port, ver,
                            "-cipher", "DEFAULT@SECLEVEL=0", "-CAfile", CA, "-verify_return_error"],
                           input="", capture_output=True, text=True, timeout=30)
        check((p.returncode == 0) == ok, "HTTPS: a handshake of openssl s_client %s %s"
              % (ver, "succeeds" if ok else "is refused"))
    check(srv.request("GET", "/healthz")[0] == 200, "HTTPS: the server answers after that")
finally:
    srv.stop()

# --- mutual TLS -------------------------------------------------------------------
now = int(time.time()) // 10 * 10
STACKS = {"main;serve;parse": 60, "main;serve;encode": 25, "main;idle": 15}
mtls = TLSServer([SONDE, "server", "--listen", "127.0.0.1:0", "--data",
                  os.path.join(D, "data-mtls"), "--tls-client-ca", CA] + SERVE_TLS, GOOD)
co = co_nocert = None
try:
    st, _, _ = mtls.request("GET", "/healthz")
    check(st == 200, "mutual TLS: a client certificate of the CA is answered (%d)" % st)
    refused(mtls, NO_CERT, "no client certificate", "mutual TLS, no client certificate")
    refused(mtls, OTHER_CA, "not signed by a CA this server trusts",
            "mutual TLS, a client certificate of another CA")
    no_http_answer(mtls, "mutual TLS")

    text = "".join("%s %d\n" % kv for kv in STACKS.items()).encode()
    query = {"name": "web", "from": now - 60, "until": now - 50, "format": "folded"}
    st, _, body = mtls.request("POST", "/ingest?" + urllib.parse.urlencode(query), text,
                               {"Content-Type": "text/plain"}, ctx=OTHER_CA)
    check(st == 403, "mutual TLS: an ingest with another CA's certificate is refused (%d)" % st)
    st, _, body = mtls.request("POST", "/ingest?" + urllib.parse.urlencode(query), text,
                               {"Content-Type": "text/plain"})
    check(st == 200, "mutual TLS: an ingest with a good certificate is taken (%d %s)"
          % (st, body[:200]))
    sel = {"query": '{service_name="web"}', "from": (now - 120) * 1000, "until": "now"}
    want = mtls.get_json("/api/v1/top", **sel)
    check(want["total"] == sum(STACKS.values()),
          "mutual TLS: the server holds the good client's samples alone (%d)" % want["total"])

    # The coordinator: HTTPS itself, a client of the mutual-TLS server.
    site = "https://127.0.0.1:%d" % mtls.port
    co = TLSServer([SONDE, "coordinator", "--listen", "127.0.0.1:0", "--server", site]
                   + SERVE_TLS + CLIENT_TLS, NO_CERT, "the coordinator")
    got = co.get_json("/api/v1/top", **sel)
    check(got == want and "partial" not in got,
          "coordinator over HTTPS with --ca/--cert/--key: the server's top exactly (%d)"
          % got.get("total", -1))
    fg = co.get_json("/api/v1/flamegraph", **sel)
    check(fg["flamebearer"]["numTicks"] == sum(STACKS.values()),
          "coordinator: its flame graph of the server's samples (%d)"
          % fg["flamebearer"]["numTicks"])
    no_http_answer(co, "the coordinator")

    co_nocert = TLSServer([SONDE, "coordinator", "--listen", "127.0.0.1:0", "--server", site,
                           "--ca", CA] + SERVE_TLS, NO_CERT, "the coordinator without --cert")
    st, _, body = co_nocert.get("/api/v1/top", **sel)
    failed = json.loads(body).get("failed", [])
    check(st == 502 and failed and "no client certificate" in failed[0]["error"],
          "coordinator without --cert: the server refuses it, 502 (%s)"
          % (failed[0]["error"] if failed else body[:200]))
    check(mtls.alive(), "the mutual-TLS server is up after all that")
finally:
    for c in (co, co_nocert):
        if c:
            c.stop()

# --- an agent ships over mutual TLS ----------------------------------------------
try:
    if os.geteuid() != 0 or not os.path.exists("/sys/kernel/btf/vmlinux"):
        skip("the agent part needs root and BTF to sample CPU stacks; everything before "
             "it passed")
    url = "https://127.0.0.1:%d" % mtls.port
    t0 = int(time.time() * 1000)
    a = Agent(["--no-gpu", "-F", "99", "--window", "1", "--node", "tls-agent",
               "--server", url] + CLIENT_TLS)
    try:
        w = subprocess.run([os.path.join(WL, "shares"), "3"], timeout=60)
        check(w.returncode == 0, "a workload ran under the agent")
        m = wait_until(lambda: (lambda m: m if value(m, "sonde_agent_ship_requests_total")
                                >= 3 and value(m, "sonde_agent_ship_queue") == 0
                                else None)(a.metrics()),
                       40, "the agent's windows to be acknowledged over mutual TLS")
        check(value(m, "sonde_agent_ship_failures_total") == 0 and
              sum(v for (n, _), v in m.items() if n == "sonde_agent_ship_dropped_total") == 0,
              "agent: %d sends acknowledged, none failed or dropped"
              % value(m, "sonde_agent_ship_requests_total"))
    finally:
        a.stop()
    top = mtls.get_json("/api/v1/top", query='{service_name="shares",node="tls-agent"}',
                        **{"from": t0 - 2000, "until": "now"})
    check(top["total"] >= 100,
          "the workload's samples shipped over mutual TLS are found by a query (%d)"
          % top["total"])

    a = Agent(["--no-gpu", "-F", "49", "--window", "1", "--server", url, "--ca", CA])
    try:
        wait_until(lambda: value(a.metrics(), "sonde_agent_ship_dropped_total",
                                 reason="rejected"), 20,
                   "an agent without --cert to have its windows refused")
        # The count may come before the agent's log line is read.
        said = wait_until(lambda: [l for l in a.log if "refused a window" in l], 20,
                          "the agent to log the refusal")
        check(any("no client certificate" in l for l in said),
              "agent without --cert: its windows are refused, with the server's reason: %s"
              % said[:1])
    finally:
        a.stop()
finally:
    mtls.stop()
