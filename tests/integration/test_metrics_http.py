"""The metrics HTTP endpoint on loopback: /metrics is Prometheus text 0.0.4
that `promtool check metrics` accepts, with the seed's names and the exact
values of scripted events; /json is the snapshot with the seed's fields;
/healthz answers; unknown paths 404, other methods 405; a route added by the
embedding program (/ws-stats) and an added exposition (sonde_ws_*) are
served; the server stops cleanly on SIGTERM."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "metrics"))
from metrics_test import Harness, check, get, need  # noqa: E402

need("promtool", "Debian prometheus")

EVENTS = [
    "capacity 0 85899345920 nvml",
    "alloc 1000 0 83886080000",
    "alloc 1001 1 4096",
    "free 1001 1 1024",
    "launch 1000 142000 98",
    "launch 1000 891000 2",
    "nccl 1000 allreduce 1048576 34000000",
    "nccl 1001 allreduce 1048576 67000000",
    "dataloader 1000 8000000",
    "wait 1000 cudaStreamSynchronize 2500000",
    "copy 1000 h2d 65536",
    "stuck 1001 allreduce 1 2 7f3a2c000000 75.5",
    "health 1000 3 500 7 12 1 0.125",
]

with Harness() as h:
    st, hdr, body = get(h.http, "/metrics")
    check(st == 200, "GET /metrics answers 200 before any event")
    text = body.decode()
    check("# TYPE zernel_dataloader_wait_seconds summary" in text,
          "zernel_dataloader_wait_seconds has HELP/TYPE while empty")

    h.send(*EVENTS)
    st, hdr, body = get(h.http, "/metrics")
    check(st == 200, "GET /metrics answers 200")
    check(hdr.get("content-type", "").startswith("text/plain; version=0.0.4"),
          "Content-Type is text/plain; version=0.0.4 (got %r)" % hdr.get("content-type"))
    p = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True,
                       timeout=30)
    print(p.stdout.decode(), p.stderr.decode())
    check(p.returncode == 0, "promtool check metrics accepts the exposition")
    text = body.decode()
    lines = set(text.splitlines())
    for want in [
        'zernel_gpu_memory_used_bytes{pid="1000",gpu_id="0"} 83886080000',
        'zernel_gpu_memory_peak_bytes{pid="1000",gpu_id="0"} 83886080000',
        'zernel_gpu_memory_used_bytes{pid="1001",gpu_id="1"} 3072',
        'zernel_gpu_memory_peak_bytes{pid="1001",gpu_id="1"} 4096',
        'zernel_cuda_launch_latency_seconds_count{pid="1000"} 100',
        'zernel_cuda_launch_latency_seconds{pid="1000",quantile="0.99"} 0.000891',
        'zernel_nccl_collective_duration_seconds_count{op="allreduce"} 2',
        'zernel_nccl_collective_duration_seconds{op="allreduce",quantile="0.99"} 0.067',
        'zernel_dataloader_wait_seconds{pid="1000",quantile="0.5"} 0.008',
        'sonde_cuda_launches_total{pid="1000"} 100',
        'sonde_gpu_memory_capacity_bytes{gpu_id="0",source="nvml"} 85899345920',
        'sonde_cuda_memcpy_bytes_total{pid="1000",kind="h2d"} 65536',
        'sonde_nccl_bytes_total{op="allreduce"} 2097152',
        'sonde_nccl_calls_total{op="allreduce"} 2',
        'sonde_nccl_stuck_seconds{pid="1001",op="allreduce",rank="1",comm="0x7f3a2c000000"} 75.5',
        'sonde_cuda_sync_wait_seconds_count{pid="1000",api="cudaStreamSynchronize"} 1',
        'sonde_agent_cpu_samples_total 1000',
        'sonde_agent_gpu_drops_total 7',
        'sonde_agent_probe_attach_failures_total 1',
        'sonde_agent_bpf_map_fill_ratio 0.125',
        'sonde_agent_simulated 0',
        'sonde_ws_clients 0',
    ]:
        check(want in lines, "exposition has: " + want)
    p50 = [l for l in lines
           if l.startswith('zernel_cuda_launch_latency_seconds{pid="1000",quantile="0.5"}')]
    check(len(p50) == 1 and abs(float(p50[0].split()[1]) - 142e-6) <= 142e-6 / 64,
          "launch p50 is 142 us within 1/64: %s" % p50)

    st, hdr, body = get(h.http, "/json")
    check(st == 200 and hdr.get("content-type") == "application/json", "GET /json is JSON")
    snap = json.loads(body)
    for k in ["gpu_utilization", "cuda_latency_p50_us", "cuda_latency_p99_us",
              "nccl_allreduce_p50_ms", "nccl_allreduce_p99_ms", "dataloader_wait_p50_ms",
              "last_update_ms", "simulated"]:
        check(k in snap, "/json has the seed's field " + k)
    g = {e["key"]: e for e in snap["gpu_utilization"]}
    check(g.get("1000:0", {}).get("current_bytes") == 83886080000
          and g["1000:0"]["peak_bytes"] == 83886080000, "/json 1000:0 current and peak")
    check(abs(snap["cuda_latency_p99_us"] - 891) <= 891 / 64, "/json cuda_latency_p99_us")
    check(snap["nccl_allreduce_p99_ms"] == 67, "/json nccl_allreduce_p99_ms")
    check(snap["dataloader_wait_p50_ms"] == 8, "/json dataloader_wait_p50_ms")
    check(snap["simulated"] is False, "/json simulated is false")
    check(snap["stuck"][0]["op"] == "allreduce" and snap["stuck"][0]["rank"] == 1,
          "/json lists the stuck collective")

    st, _, body = get(h.http, "/healthz")
    check(st == 200 and body == b"ok\n", "GET /healthz is ok")
    st, _, _ = get(h.http, "/nope")
    check(st == 404, "unknown path is 404")
    st, hdr, _ = get(h.http, "/metrics", "POST")
    check(st == 405 and "GET" in hdr.get("allow", ""), "POST is 405 with Allow")
    st, _, body = get(h.http, "/metrics", "HEAD")
    check(st == 200 and body == b"", "HEAD /metrics is 200 without a body")
    st, _, body = get(h.http, "/ws-stats")
    check(st == 200 and "clients" in json.loads(body), "an added route is served")
    st, _, body = get(h.http, "/metrics?x=1")
    check(st == 200, "a query string doesn't change the route")

    h.send("exit 1000")
    _, _, body = get(h.http, "/metrics")
    check('sonde_process_exit_time_seconds{pid="1000"}' in body.decode() and
          'sonde_cuda_launches_total{pid="1000"}' in body.decode(),
          "an exited process's series stay, with its exit time")
    h.send("expire 0")
    _, _, body = get(h.http, "/metrics")
    check('pid="1000"' not in body.decode(), "... and go past the grace")
    check(h.stop() == 0, "the harness stops cleanly on SIGTERM")
print("PASS")
