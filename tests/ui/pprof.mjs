// pprof.mjs: reads a pprof profile (profile.proto, uncompressed) far enough to
// check an export: the string table, functions, locations and samples, decoded
// from the protobuf wire format. Used by run.mjs on the UI's pprof download.

function reader(buf) {
	let pos = 0;
	const varint = () => {
		let v = 0n, shift = 0n;
		for (;;) {
			if (pos >= buf.length)
				throw new Error('pprof: truncated varint');
			const b = buf[pos++];
			v |= BigInt(b & 0x7f) << shift;
			if (!(b & 0x80))
				return v;
			shift += 7n;
			if (shift > 63n)
				throw new Error('pprof: varint too long');
		}
	};
	return {
		done: () => pos >= buf.length,
		// [field, wiretype, value]: value a BigInt or a Buffer.
		next() {
			const key = Number(varint());
			const f = key >> 3, wt = key & 7;
			if (wt === 0)
				return [f, wt, varint()];
			if (wt === 2) {
				const n = Number(varint());
				if (pos + n > buf.length)
					throw new Error('pprof: truncated field');
				const v = buf.subarray(pos, pos + n);
				pos += n;
				return [f, wt, v];
			}
			if (wt === 1 || wt === 5) {
				const n = wt === 1 ? 8 : 4;
				const v = buf.subarray(pos, pos + n);
				pos += n;
				return [f, wt, v];
			}
			throw new Error(`pprof: unsupported wire type ${wt}`);
		},
	};
}

function fields(buf) {
	const r = reader(buf), out = [];
	while (!r.done())
		out.push(r.next());
	return out;
}

// Repeated integers packed into one field.
function packed(buf) {
	const out = [];
	let pos = 0;
	while (pos < buf.length) {
		let v = 0n, shift = 0n;
		for (;;) {
			const b = buf[pos++];
			v |= BigInt(b & 0x7f) << shift;
			if (!(b & 0x80))
				break;
			shift += 7n;
		}
		out.push(Number(v));
	}
	return out;
}

export function parsePprof(buf) {
	const strings = [], samples = [], locations = new Map(), functions = new Map();
	for (const [f, wt, v] of fields(buf)) {
		if (f === 6)
			strings.push(Buffer.from(v).toString('utf8'));
		else if (f === 2) {
			const s = { loc: [], value: [] };
			for (const [sf, swt, sv] of fields(v)) {
				if (sf === 1)
					s.loc.push(...(swt === 0 ? [Number(sv)] : packed(sv)));
				else if (sf === 2)
					s.value.push(...(swt === 0 ? [Number(sv)] : packed(sv)));
			}
			samples.push(s);
		} else if (f === 4) {
			const l = { id: 0, fn: [] };
			for (const [lf, , lv] of fields(v)) {
				if (lf === 1)
					l.id = Number(lv);
				else if (lf === 4)
					for (const [ef, , ev] of fields(lv))
						if (ef === 1)
							l.fn.push(Number(ev));
			}
			locations.set(l.id, l);
		} else if (f === 5) {
			const fn = { id: 0, name: 0 };
			for (const [ff, , fv] of fields(v)) {
				if (ff === 1)
					fn.id = Number(fv);
				else if (ff === 2)
					fn.name = Number(fv);
			}
			functions.set(fn.id, fn);
		}
	}
	const nameOfLoc = (id) => {
		const l = locations.get(id);
		if (!l || !l.fn.length)
			return `location ${id}`;
		// Inlined frames come first; the leaf is the first line.
		const fn = functions.get(l.fn[0]);
		return fn ? strings[fn.name] : `function ${l.fn[0]}`;
	};
	return {
		strings, samples, locations, functions,
		// {leaf function: sum of value i}, as `go tool pprof -top -sample_index=i`
		// counts flat. Sonde's pprof has samples/count first, then the type's
		// unit (cpu/nanoseconds: count x period).
		selfByFunction(i = 0) {
			const out = {};
			for (const s of samples) {
				if (!s.loc.length)
					continue;
				const n = nameOfLoc(s.loc[0]);
				out[n] = (out[n] || 0) + s.value[i];
			}
			return out;
		},
	};
}
