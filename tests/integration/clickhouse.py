"""clickhouse.py: a real ClickHouse server for the tests of the ClickHouse
store -- Debian's clickhouse-server, started by the test on 127.0.0.1 with
a config of its own (free ports, a data directory in a temporary
directory, zstd compression as docs/perf.md measures it), waited for with
/ping, and stopped, killed or restarted on the same data. Skips (exit 77)
when clickhouse-server is not installed. Stdlib only."""
import atexit
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request

from sonde_test import fail, free_port, skip, tmpdir

CONFIG = """<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>{dir}/server.log</log>
    <errorlog>{dir}/error.log</errorlog><console>0</console></logger>
  <http_port>{http}</http_port>
  <tcp_port>{tcp}</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>{dir}/data/</path>
  <tmp_path>{dir}/tmp/</tmp_path>
  <users_config>{dir}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>5368709120</mark_cache_size>
  <compression><case><method>zstd</method></case></compression>
</yandex>
"""

USERS = """<?xml version="1.0"?>
<yandex>
  <profiles><default></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip></networks>
    <profile>default</profile><quota>default</quota></default></users>
  <quotas><default></default></quotas>
</yandex>
"""


class ClickHouse:
    def __init__(self):
        binary = shutil.which("clickhouse-server") or "/usr/sbin/clickhouse-server"
        if not os.access(binary, os.X_OK):
            skip("clickhouse-server is not installed (scripts/setup.sh installs it)")
        self.binary = binary
        self.dir = tmpdir()
        self.http = free_port()
        self.tcp = free_port()
        with open(os.path.join(self.dir, "config.xml"), "w") as f:
            f.write(CONFIG.format(dir=self.dir, http=self.http, tcp=self.tcp))
        with open(os.path.join(self.dir, "users.xml"), "w") as f:
            f.write(USERS)
        self.p = None
        self.log = None
        atexit.register(self.kill)
        self.start()

    def url(self, database):
        return "clickhouse://127.0.0.1:%d/%s" % (self.http, database)

    def start(self, timeout=90):
        self.log = open(os.path.join(self.dir, "stdout.log"), "a")
        self.p = subprocess.Popen([self.binary, "--config-file=" + os.path.join(self.dir,
                                                                               "config.xml")],
                                  stdout=self.log, stderr=subprocess.STDOUT,
                                  start_new_session=True, cwd=self.dir)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.p.poll() is not None:
                fail("clickhouse-server exited with %d:\n%s" % (self.p.returncode,
                                                                self.tail()))
            if self.ping():
                return
            time.sleep(0.1)
        self.kill()
        fail("clickhouse-server did not answer /ping in %d s:\n%s" % (timeout, self.tail()))

    def ping(self):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/ping" % self.http,
                                        timeout=2) as r:
                return r.read().strip() == b"Ok."
        except (OSError, urllib.error.URLError):
            return False

    def query(self, sql, database=None):
        url = "http://127.0.0.1:%d/" % self.http
        if database:
            url += "?database=" + database
        req = urllib.request.Request(url, data=sql.encode(), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.read().decode()
        except urllib.error.HTTPError as e:
            fail("ClickHouse refused %r: %s" % (sql, e.read()[:300]))

    def tail(self):
        try:
            with open(os.path.join(self.dir, "error.log")) as f:
                return "".join(f.readlines()[-15:])
        except OSError:
            return "(no error log)"

    def kill(self):
        """SIGKILL, as a crash (and at the test's exit, whatever happened)."""
        if self.p and self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait(30)
        if self.log:
            self.log.close()

    def stop(self):
        if self.p and self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.log:
            self.log.close()
