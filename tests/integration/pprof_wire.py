"""pprof_wire.py: a minimal encoder of pprof's wire format
(perftools.profiles.Profile), for tests that send the server profiles of
known content."""


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7f) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def field(num, payload):  # length-delimited
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def vint(num, v):
    return varint(num << 3) + varint(v)


def packed(num, vals):
    return field(num, b"".join(varint(v) for v in vals))


def encode(types, samples, sources=None, modules=None):
    """The raw Profile message. types: [(type, unit)]; samples: [(["root",
    ..., "leaf"], [values])], or with a third item, {key: value}, the
    sample's string labels; sources: {function name: (file, first line)}
    for the functions that say where they are (their Line at that line);
    modules: {function name: module path} for the functions whose location
    is in a mapping of that file (one mapping per module)."""
    strings = [""]
    sources = sources or {}
    modules = modules or {}
    maps = {m: k + 1 for k, m in enumerate(dict.fromkeys(modules.values()))}

    def s(x):
        if x not in strings:
            strings.append(x)
        return strings.index(x)

    msg = b""
    for t, u in types:
        msg += field(1, vint(1, s(t)) + vint(2, s(u)))
    funcs = {}
    for sample in samples:
        stack, values = sample[0], sample[1]
        labels = sample[2] if len(sample) > 2 else {}
        for name in stack:
            funcs.setdefault(name, len(funcs) + 1)
        locs = [funcs[n] for n in reversed(stack)]  # leaf first; location id = function id
        msg += field(2, packed(1, locs) + packed(2, values)
                     + b"".join(field(3, vint(1, s(k)) + vint(2, s(v)))
                                for k, v in labels.items()))
    for name, fid in funcs.items():
        file, first = sources.get(name, ("", 0))
        line = vint(1, fid) + (vint(2, first) if first else b"")
        mapping = b""
        if name in modules:
            mid = maps[modules[name]]
            mapping = vint(2, mid) + vint(3, mid << 24 | fid << 4)
        msg += field(4, vint(1, fid) + mapping + field(4, line))
        fn = vint(1, fid) + vint(2, s(name))
        if file:
            fn += vint(4, s(file)) + vint(5, first)
        msg += field(5, fn)
    for path, mid in maps.items():
        msg += field(3, vint(1, mid) + vint(2, mid << 24) + vint(3, (mid + 1) << 24)
                     + vint(5, s(path)))
    for x in strings:
        msg += field(6, x.encode())
    return msg
