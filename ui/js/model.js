// model.js: the flame graph's data model. Decodes the server's flamebearer
// (single and diff, docs/api.md) into flat typed arrays stored level by level,
// builds models from call trees (the sandwich view, the speedscope page), and
// answers the questions the views ask of a profile: search shares, callers and
// callees of a function. Used by flamegraph.js, app.js and speedscope.js.

// A flame graph of n nodes. Node i has depth depth[i], starts at start[i]
// ticks and spans total[i] ticks (self[i] of them in itself), is named
// names[name[i]], and its parent is parent[i] (-1 for the root). Nodes of
// depth d are the indices levelOff[d] .. levelOff[d + 1] - 1, left to right;
// the children of node i are childFirst[i] .. childFirst[i] + childCount[i] - 1.
// A diff model also has lTotal/lSelf/rTotal/rSelf and leftTicks/rightTicks.
export class FlameModel {
	constructor(n, names) {
		this.n = n;
		this.names = names;
		this.name = new Int32Array(n);
		this.start = new Float64Array(n);
		this.total = new Float64Array(n);
		this.self = new Float64Array(n);
		this.depth = new Int32Array(n);
		this.parent = new Int32Array(n);
		this.childFirst = new Int32Array(n);
		this.childCount = new Int32Array(n);
		this.levelOff = new Int32Array(1);
		this.numTicks = 0;
		this.unit = '';
		this.diff = null;
		this.sources = null; // per name: "FILE:LINE" of its function, '' unknown
	}

	get levels() {
		return this.levelOff.length - 1;
	}

	nameOf(i) {
		return this.names[this.name[i]];
	}

	// Where node i's function is in the source ("FILE:LINE"), '' if unknown.
	sourceOf(i) {
		return (this.sources && this.sources[this.name[i]]) || '';
	}

	// The index of the node of depth d covering tick x, or -1.
	nodeAt(d, x) {
		if (d < 0 || d >= this.levels)
			return -1;
		let lo = this.levelOff[d], hi = this.levelOff[d + 1] - 1;
		while (lo <= hi) {
			const mid = (lo + hi) >> 1;
			if (this.start[mid] + this.total[mid] <= x)
				lo = mid + 1;
			else if (this.start[mid] > x)
				hi = mid - 1;
			else
				return mid;
		}
		return -1;
	}

	// Links parents and children from the level-ordered starts (children lie
	// inside their parent, so one pass per level pairs them).
	link() {
		this.parent.fill(-1);
		this.childFirst.fill(0);
		this.childCount.fill(0);
		for (let d = 1; d < this.levels; d++) {
			let p = this.levelOff[d - 1];
			const pe = this.levelOff[d];
			for (let i = this.levelOff[d]; i < this.levelOff[d + 1]; i++) {
				while (p < pe && this.start[p] + this.total[p] <= this.start[i])
					p++;
				if (p >= pe || this.start[p] > this.start[i] ||
				    this.start[i] + this.total[i] > this.start[p] + this.total[p])
					throw new Error(`flame graph node ${i} (${this.nameOf(i)}) at depth ${d} ` +
							'lies outside every node of the level above');
				this.parent[i] = p;
				if (this.childCount[p] === 0)
					this.childFirst[p] = i;
				this.childCount[p]++;
			}
		}
	}
}

function fail(msg) {
	throw new Error('malformed flame graph from the server: ' + msg);
}

// Decodes an answer of /api/v1/flamegraph or /api/v1/diff.
export function fromFlamebearer(json) {
	const fb = json && json.flamebearer;
	if (!fb || !Array.isArray(fb.names) || !Array.isArray(fb.levels))
		fail('no flamebearer.names or flamebearer.levels');
	const meta = json.metadata || {};
	const double = meta.format === 'double';
	const w = double ? 7 : 4;
	let n = 0;
	for (const lv of fb.levels) {
		if (!Array.isArray(lv) || lv.length % w)
			fail(`a level's length is not a multiple of ${w}`);
		n += lv.length / w;
	}
	const m = new FlameModel(n, fb.names.map(String));
	m.unit = meta.units || '';
	if (Array.isArray(fb.sources)) {
		if (fb.sources.length !== fb.names.length)
			fail(`${fb.sources.length} sources for ${fb.names.length} names`);
		m.sources = fb.sources.map(String);
	}
	if (double) {
		m.diff = {
			lTotal: new Float64Array(n), lSelf: new Float64Array(n),
			rTotal: new Float64Array(n), rSelf: new Float64Array(n),
			leftTicks: +fb.leftTicks || 0, rightTicks: +fb.rightTicks || 0,
		};
	}
	const off = [0];
	let k = 0;
	for (const lv of fb.levels) {
		let le = 0, re = 0;
		for (let j = 0; j < lv.length; j += w) {
			for (let q = 0; q < w; q++)
				if (!Number.isSafeInteger(lv[j + q]) || lv[j + q] < 0)
					fail(`a node holds ${JSON.stringify(lv[j + q])}, not a count`);
			const ni = lv[j + w - 1];
			if (ni >= m.names.length)
				fail(`name index ${ni} is past the ${m.names.length} names`);
			let x, t, s;
			if (double) {
				const lx = le + lv[j], rx = re + lv[j + 3];
				le = lx + lv[j + 1];
				re = rx + lv[j + 4];
				m.diff.lTotal[k] = lv[j + 1];
				m.diff.lSelf[k] = lv[j + 2];
				m.diff.rTotal[k] = lv[j + 4];
				m.diff.rSelf[k] = lv[j + 5];
				x = lx + rx;
				t = lv[j + 1] + lv[j + 4];
				s = lv[j + 2] + lv[j + 5];
			} else {
				x = le + lv[j];
				t = lv[j + 1];
				s = lv[j + 2];
				le = x + t;
			}
			m.start[k] = x;
			m.total[k] = t;
			m.self[k] = s;
			m.name[k] = ni;
			m.depth[k] = off.length - 1;
			k++;
		}
		off.push(k);
	}
	m.levelOff = Int32Array.from(off);
	m.numTicks = n ? m.total[0] : 0;
	if (!(m.numTicks <= Number.MAX_SAFE_INTEGER))
		fail('the total is above 2^53');
	if (double && !m.diff.leftTicks && n)
		m.diff.leftTicks = m.diff.lTotal[0];
	if (double && !m.diff.rightTicks && n)
		m.diff.rightTicks = m.diff.rTotal[0];
	if (n && m.levelOff[1] !== 1)
		fail('level 0 must hold the root alone');
	m.link();
	return m;
}

// A call tree under construction: {name, total, self, kids: Map}.
export function treeNode(name) {
	return { name, total: 0, self: 0, kids: new Map() };
}

export function treeChild(node, name) {
	let c = node.kids.get(name);
	if (!c) {
		c = treeNode(name);
		node.kids.set(name, c);
	}
	return c;
}

// Lays a call tree out as a FlameModel, children ordered by name (as the
// server does) or, with order 'weight', heaviest first (speedscope's "left
// heavy"), or with 'insertion' in the order they were added (time order).
export function fromTree(root, unit, order = 'name') {
	const names = [], nameIdx = new Map(), levels = [];
	const stack = [[root, 0, 0]];
	while (stack.length) {
		const [node, d, x] = stack.pop();
		if (!nameIdx.has(node.name)) {
			nameIdx.set(node.name, names.length);
			names.push(node.name);
		}
		(levels[d] || (levels[d] = [])).push([x, node.total, node.self, nameIdx.get(node.name)]);
		const kids = [...node.kids.values()].filter((c) => c.total > 0);
		if (order === 'insertion')
			; // as added: time order
		else if (order === 'weight')
			kids.sort((a, b) => (a.total > b.total ? -1 : a.total < b.total ? 1 : 0));
		else
			kids.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
		let cx = x;
		const pos = kids.map((c) => {
			const p = cx;
			cx += c.total;
			return p;
		});
		for (let i = kids.length - 1; i >= 0; i--)
			stack.push([kids[i], d + 1, pos[i]]);
	}
	let n = 0;
	for (const lv of levels)
		n += lv.length;
	const m = new FlameModel(n, names);
	m.unit = unit || '';
	const off = [0];
	let k = 0;
	for (let d = 0; d < levels.length; d++) {
		levels[d].sort((a, b) => a[0] - b[0]);
		for (const [x, t, s, ni] of levels[d]) {
			m.start[k] = x;
			m.total[k] = t;
			m.self[k] = s;
			m.name[k] = ni;
			m.depth[k] = d;
			k++;
		}
		off.push(k);
	}
	m.levelOff = Int32Array.from(off);
	m.numTicks = root.total;
	m.link();
	return m;
}

// A predicate on names from what the user typed: /regex/ or a
// case-insensitive substring. null for an empty search.
export function nameMatcher(text) {
	text = (text || '').trim();
	if (!text)
		return null;
	const re = /^\/(.+)\/([a-z]*)$/.exec(text);
	if (re) {
		try {
			const r = new RegExp(re[1], re[2].includes('i') ? 'i' : '');
			return (s) => r.test(s);
		} catch (e) {
			throw new Error(`bad regular expression ${text}: ${e.message}`);
		}
	}
	const low = text.toLowerCase();
	return (s) => s.toLowerCase().includes(low);
}

// Marks the nodes whose name matches; ticks counts each matching stack once
// (a match under a match is not added again), so ticks / numTicks is the share
// of the profile in matching functions.
export function search(m, matcher) {
	const matched = new Uint8Array(m.n);
	const nameHit = m.names.map((s) => (matcher ? matcher(s) : false));
	const under = new Uint8Array(m.n);
	let ticks = 0, count = 0;
	const names = new Set();
	for (let i = 1; i < m.n; i++) {
		const p = m.parent[i];
		if (nameHit[m.name[i]]) {
			matched[i] = 1;
			count++;
			names.add(m.name[i]);
			if (!under[p])
				ticks += m.total[i];
			under[i] = 1;
		} else {
			under[i] = under[p];
		}
	}
	return { matched, ticks, count, functions: names.size };
}

// The sandwich view of function fn: callers (an inverted tree rooted at fn,
// each path climbing to the outermost caller) and callees (fn's subtrees
// merged). Recursion counts once: only the outermost calls of fn are taken.
export function sandwich(m, fn) {
	const fi = m.names.indexOf(fn);
	const callers = treeNode(fn), callees = treeNode(fn);
	if (fi < 0)
		return null;
	const inside = new Uint8Array(m.n);
	const addSubtree = (dst, i) => {
		for (let c = m.childFirst[i], e = c + m.childCount[i]; c < e; c++) {
			const t = treeChild(dst, m.nameOf(c));
			t.total += m.total[c];
			t.self += m.self[c];
			addSubtree(t, c);
		}
	};
	for (let i = 1; i < m.n; i++) {
		const p = m.parent[i];
		const hit = m.name[i] === fi;
		inside[i] = hit || inside[p];
		if (!hit || inside[p])
			continue;
		const w = m.total[i];
		callees.total += w;
		callees.self += m.self[i];
		addSubtree(callees, i);
		callers.total += w;
		let t = callers;
		for (let a = p; a > 0; a = m.parent[a]) {
			t = treeChild(t, m.nameOf(a));
			t.total += w;
		}
		t.self += w;
	}
	return {
		callers: fromTree(callers, m.unit),
		callees: fromTree(callees, m.unit),
		total: callees.total,
	};
}
