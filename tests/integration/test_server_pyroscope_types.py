"""A Pyroscope client's multipart pprof with a sample_type_config part (what
pyroscope-go sends for heap profiles): one series per configured sample type
the profile has, typed by its display-name and in its units, each queryable
through /pyroscope/render with exact totals; a cumulative type or a broken
config is refused with a 400 naming it, and nothing of the request is
stored."""
import gzip
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from sonde_test import check, tmpdir  # noqa: E402
from server_test import Server, error_of  # noqa: E402
import pprof_wire  # noqa: E402


def pprof(types, samples):
    """types: [(type, unit)]; samples: [(["root", ..., "leaf"], [values])]; gzip."""
    return gzip.compress(pprof_wire.encode(types, samples))


def multipart(parts):
    body = b""
    for name, data in parts:
        body += (b"--BND\r\nContent-Disposition: form-data; name=\"%s\"; filename=\"%s\"\r\n"
                 b"Content-Type: application/octet-stream\r\n\r\n" % (name, name)) + data + b"\r\n"
    return body + b"--BND--\r\n"


HEAP = [("alloc_objects", "count"), ("alloc_space", "bytes"),
        ("inuse_objects", "count"), ("inuse_space", "bytes")]
SAMPLES = [(["main", "grow", "malloc"], [3, 300, 1, 100]),
           (["main", "load", "malloc"], [5, 4000, 2, 1500])]
CONFIG = {"alloc_space": {"units": "bytes", "aggregation": "sum", "cumulative": False},
          "inuse_space": {"units": "bytes", "display-name": "inuse_space_bytes",
                          "aggregation": "average", "cumulative": False},
          "goroutine": {"units": "goroutines"}}  # not in the profile: skipped

srv = Server(tmpdir())
try:
    now = int(time.time())
    body = multipart([(b"profile", pprof(HEAP, SAMPLES)),
                      (b"sample_type_config", json.dumps(CONFIG).encode())])
    st, _, out = srv.post("/ingest", body, "multipart/form-data; boundary=BND",
                          name="heapapp{env=prod}", format="pprof", spyName="gospy",
                          **{"from": now - 10}, until=now)
    check(st == 200, "the multipart heap profile is accepted (%d %s)" % (st, out[:200]))
    types = srv.get_json("/api/v1/label/values", name="type",
                         query='{service_name="heapapp"}')["values"]
    check(types == ["alloc_space", "inuse_space_bytes"],
          "a series per configured type it has, by display-name: %s" % types)
    for q, total, unit in [("heapapp.alloc_space{env=\"prod\"}", 4300, "bytes"),
                           ("heapapp.inuse_space_bytes{env=\"prod\"}", 1600, "bytes")]:
        st, _, b = srv.get("/pyroscope/render", query=q, format="json",
                           **{"from": now - 60}, until=now + 60)
        doc = json.loads(b)
        fb = doc["flamebearer"]
        check(st == 200 and fb["numTicks"] == total,
              "%s: %d ticks (want %d)" % (q, fb["numTicks"], total))
        check(doc["metadata"]["units"] == unit, "%s in %s" % (q, doc["metadata"]["units"]))

    # Refused whole, with the reason; nothing stored.
    for cfg, says in [({"alloc_space": {"cumulative": True}}, "cumulative"),
                      ("{\"alloc_space\": ", "not valid JSON"),
                      ({"goroutine": {}}, "none of the sample types")]:
        raw = cfg.encode() if isinstance(cfg, str) else json.dumps(cfg).encode()
        body = multipart([(b"profile", pprof(HEAP, SAMPLES)), (b"sample_type_config", raw)])
        st, _, out = srv.post("/ingest", body, "multipart/form-data; boundary=BND",
                              name="badheap", format="pprof", **{"from": now - 10}, until=now)
        check(st == 400 and says in error_of(out), "%s: 400 '%s'" % (says, error_of(out)))
    vals = srv.get_json("/api/v1/label/values", name="service_name")["values"]
    check(vals == ["heapapp"], "the refused requests stored nothing: %s" % vals)
finally:
    srv.stop()
