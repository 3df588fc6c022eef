# perf_fold.sh: perf's samples as folded stacks, like Sonde's -- sourced by
# the benchmarks that set them side by side (bench/unwind.sh,
# bench/late_stacks.sh). Needs $TMP (a scratch directory) and $HPY (a
# python3).

# perf_fix DATA: clears the build-id flag (PERF_RECORD_MISC_MMAP_BUILD_ID)
# from the MMAP2 records of a perf.data that perf recorded without build-ids;
# prints how many it cleared. The kernel sets it on every perf event's record
# of a mapping when another event on the machine asks for build-ids (Sonde's
# sideband does): the flag stays set in the record it shares between events
# (seen on 6.18), and perf 6.1 reads the device and inode as a build-id and
# aborts ("assertion failed at util/build-id.c:1010", stack smashing), in
# report and script, and in record's build-id pass at the end: perf record
# runs with -B.
perf_fix() {
	"$HPY" - "$1" <<'EOF'
import struct, sys
with open(sys.argv[1], "r+b") as f:
    d = bytearray(f.read())
    data_off, data_size = struct.unpack_from("<QQ", d, 40)
    off, fixed = data_off, 0
    while off + 8 <= data_off + data_size:
        typ, misc, size = struct.unpack_from("<IHH", d, off)
        if size < 8:
            break
        if typ == 10 and misc & 0x4000:  # PERF_RECORD_MMAP2
            struct.pack_into("<H", d, off + 4, misc & ~0x4000)
            fixed += 1
        off += size
    f.seek(0)
    f.write(d)
print(fixed)
EOF
}

# perf_fold DATA OUT: perf's samples as folded stacks (comm;root;...;leaf N),
# like sonde's.
perf_fold() {
	perf_fix "$1" >"$TMP/fixed"
	timeout 600 perf script -i "$1" -F comm,ip,sym 2>/dev/null | "$HPY" -c '
import collections, sys
out = collections.Counter()
comm, frames = None, []
def flush():
    if comm is not None:
        out[";".join([comm] + frames[::-1])] += 1
for line in sys.stdin:
    line = line.rstrip("\n")
    if not line.strip():
        continue
    if not line[0].isspace():
        flush()
        comm, frames = line.split()[0], []
        continue
    parts = line.split(None, 1)
    sym = parts[1] if len(parts) > 1 else "[unknown]"
    if sym.endswith(" (inlined)"):
        sym = sym[:-len(" (inlined)")]
    frames.append(sym.replace(";", ":"))
flush()
for k, v in out.items():
    print(k, v)' >"$2"
}
