"""GPU probes against the REAL libnccl.so.2: every collective, send/recv,
group and communicator initialisation is called with known arguments --
ncclReduce's communicator and stream are on the stack, ncclCommInitRank's
128-byte ncclUniqueId is passed by value on the stack, which moves rank to
the third register -- and AllReduce once per ncclDataType_t, so that the
bytes of every type (bfloat16 and fp8 included) are count x size, sizes by
the names nccl.h gives the types. NCCL rejects the NULL communicator
cleanly; a second run of each op in a forked child, with a communicator on
an inaccessible page, shows a non-NULL communicator decoded at entry. The
pnccl* aliases share the nccl* addresses: each function is probed once."""
from gpu_real import *

need_cuda("lib64/libnccl.so.2", "include/nccl.h")

SIZES = {"ncclInt8": 1, "ncclUint8": 1, "ncclInt32": 4, "ncclUint32": 4, "ncclInt64": 8,
         "ncclUint64": 8, "ncclFloat16": 2, "ncclFloat32": 4, "ncclFloat64": 8,
         "ncclBfloat16": 2, "ncclFloat8e4m3": 1, "ncclFloat8e5m2": 1}

events, probes, stats, e = dump("nccl_calls")
check(e["num_types"] == len(SIZES), "nccl.h has the %d data types the test knows" % len(SIZES))
attached(probes, "nccl_calls", "libnccl.so.2")
drops = {k: v for k, v in stats["drops"].items() if v}
check(not drops and stats["bad_records"] == 0 and stats["events"] == stats["received"],
      "no drops, no malformed records")
check(stats["inflight_live"] == 0, "the faulting children's calls were swept")
T, O = e["types"], e["ops"]
main_pid = one(events, "nccl_group", "ncclGroupStart")["pid"]
mine = [ev for ev in events if ev["pid"] == main_pid]
rc = iter(e["rc"])

# Each op as nccl_calls.c calls it: api, fields.
OPS = [
    ("ncclAllReduce", dict(coll="allreduce", sendbuff=0x1000, recvbuff=0x2000, count=1000,
                           datatype=T["ncclFloat32"], redop=O["ncclMax"], peer=-1,
                           stream=0x77, bytes=1000 * 4)),
    ("ncclAllGather", dict(coll="allgather", sendbuff=0x1100, recvbuff=0x2100, count=2000,
                           datatype=T["ncclBfloat16"], peer=-1, stream=0x78, bytes=2000 * 2)),
    ("ncclReduceScatter", dict(coll="reducescatter", sendbuff=0x1200, recvbuff=0x2200,
                               count=3000, datatype=T["ncclFloat16"], redop=O["ncclProd"],
                               peer=-1, stream=0x79, bytes=3000 * 2)),
    ("ncclBroadcast", dict(coll="broadcast", sendbuff=0x1300, recvbuff=0x2300, count=4000,
                           datatype=T["ncclInt64"], peer=3, stream=0x7a, bytes=4000 * 8)),
    ("ncclReduce", dict(coll="reduce", sendbuff=0x1400, recvbuff=0x2400, count=5000,
                        datatype=T["ncclUint8"], redop=O["ncclMin"], peer=2, stream=0x7b,
                        bytes=5000)),
    ("ncclSend", dict(coll="send", sendbuff=0x1500, count=6000, datatype=T["ncclFloat64"],
                      peer=5, stream=0x7c, bytes=6000 * 8)),
    ("ncclRecv", dict(coll="recv", recvbuff=0x2600, count=7000, datatype=T["ncclFloat8e4m3"],
                      peer=6, stream=0x7d, bytes=7000)),
]
for name, want in OPS:
    b = one(mine, "nccl_begin", name, count=want["count"])
    end = one(mine, "nccl_end", name, count=want["count"])
    fields(b, name + " begin", comm=0, **want)
    fields(end, name + " end", comm=0, ret=next(rc), **want)
    check(b["ts"] == end["ts"] - end["dur"], "%s: the begin is the end's entry" % name)
    check(end.get("stack", [None])[0] == "sonde_nccl_op" and "main" in end["stack"],
          "%s: the calling stack (%s)" % (name, end.get("stack")))

one(mine, "nccl_group", "ncclGroupStart")
fields(one(mine, "nccl_group", "ncclGroupStart"), "ncclGroupStart()", ret=next(rc), bytes=0)
fields(one(mine, "nccl_group", "ncclGroupEnd"), "ncclGroupEnd()", ret=next(rc), bytes=0)
one(mine, "nccl_begin", "ncclGroupEnd")

for name, t in sorted(T.items(), key=lambda kv: kv[1]):
    count = 100 + t
    end = one(mine, "nccl_end", "ncclAllReduce", count=count)
    fields(end, "ncclAllReduce of %s" % name, datatype=t, type_size=SIZES[name],
           bytes=count * SIZES[name], redop=O["ncclSum"], stream=0x100 + t,
           sendbuff=0x3000 + t, recvbuff=0x4000 + t, ret=next(rc))

ev = one(mine, "nccl_comm", "ncclCommInitRank")
fields(ev, "ncclCommInitRank(&comm, 4, id, 2)", nranks=4, rank=2, comm=0x7171, ret=next(rc))
ev = one(mine, "nccl_comm", "ncclCommInitRankConfig")
fields(ev, "ncclCommInitRankConfig(&comm, 8, id, 5, &config)", nranks=8, rank=5, comm=0x7272,
       ret=next(rc))
check(next(rc, None) is None, "every call of the program was checked")

# The forked children: a non-NULL communicator, the same other arguments.
for (name, want), status in zip(OPS, e["poison_status"]):
    kids = [ev for ev in events if ev["pid"] != main_pid and ev["type"] == "nccl_begin" and
            ev["api"] == name]
    check(len(kids) == 1, "%s with a bad communicator: one entry seen (status %d)"
          % (name, status))
    fields(kids[0], name + " with comm", comm=e["poison"], **want)
exits = {ev["pid"] for ev in events if ev["type"] == "process_exit"}
check(len(exits) == 8 and main_pid in exits, "the exits of the process and its children")
