// bigflame.mjs: a generated flame graph of N nodes in the server's
// flamebearer format, for the smoothness measurement of run.mjs and the
// benchmark bench/ui_flame.mjs: a deterministic random tree, deep on one
// side and wide on the other, whose node sizes spread over five orders of
// magnitude (as real profiles do: a few hot paths, a long tail).

function rng(seed) {
	let s = seed >>> 0 || 1;
	return () => {
		s ^= s << 13;
		s >>>= 0;
		s ^= s >>> 17;
		s ^= s << 5;
		s >>>= 0;
		return s / 4294967296;
	};
}

export function generateFlamebearer(n, seed = 1) {
	const rand = rng(seed);
	const parent = new Int32Array(n + 1).fill(-1);
	const depth = new Int32Array(n + 1);
	const self = new Float64Array(n + 1);
	const kids = Array.from({ length: n + 1 }, () => []);
	for (let i = 1; i <= n; i++) {
		// Mostly recent nodes as parents (depth), sometimes any (width).
		const r = rand();
		let p = r < 0.7 ? i - 1 - Math.floor(rand() * Math.min(i, 8)) : Math.floor(rand() ** 2 * i);
		if (depth[p] >= 60)
			p = parent[p];
		parent[i] = p;
		depth[i] = depth[p] + 1;
		kids[p].push(i);
		self[i] = Math.floor(10 ** (rand() * 5));
	}
	const total = Float64Array.from(self);
	for (let i = n; i >= 1; i--)
		total[parent[i]] += total[i];
	const names = ['total'];
	const nameIdx = new Map([['total', 0]]);
	const nameOf = (i) => `pkg${i % 97}.func_${(i * 2654435761 >>> 0) % 20000}_${i}`;
	const levels = [];
	const start = new Float64Array(n + 1);
	// Children ordered by name, laid out left to right inside their parent.
	const order = [0];
	for (let k = 0; k < order.length; k++) {
		const i = order[k];
		const ch = kids[i].sort((a, b) => (nameOf(a) < nameOf(b) ? -1 : 1));
		let x = start[i];
		for (const c of ch) {
			start[c] = x;
			x += total[c];
			order.push(c);
		}
	}
	const byLevel = [];
	for (const i of order)
		(byLevel[depth[i]] || (byLevel[depth[i]] = [])).push(i);
	for (const lv of byLevel) {
		lv.sort((a, b) => start[a] - start[b]);
		const row = [];
		let end = 0;
		for (const i of lv) {
			const nm = i ? nameOf(i) : 'total';
			if (!nameIdx.has(nm)) {
				nameIdx.set(nm, names.length);
				names.push(nm);
			}
			row.push(start[i] - end, total[i], self[i], nameIdx.get(nm));
			end = start[i] + total[i];
		}
		levels.push(row);
	}
	return {
		version: 1, nodes: n + 1,
		flamebearer: { names, levels, numTicks: total[0], maxSelf: Math.max(...self) },
		metadata: { format: 'single', name: 'cpu', units: 'samples', spyName: 'sonde', sampleRate: 99 },
	};
}
