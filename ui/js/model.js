// model.js: the flame graph's data model. Decodes the server's flamebearer
// (single and diff, docs/api.md) into flat typed arrays stored level by level,
// builds models from call trees (the sandwich view, the speedscope page),
// answers the questions the views ask of a profile (search shares, callers and
// callees of a function, a node's path of names), and transforms a profile as
// pprof's -focus and -hide do: focus on a function or a node, hide functions,
// collapse a function into itself. Used by flamegraph.js, app.js and
// speedscope.js.

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
		this.modules = null; // per name: its function's module (basename), '' unknown
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

	// The module (executable or library, its basename) of node i's
	// function, '' if unknown.
	moduleOf(i) {
		return (this.modules && this.modules[this.name[i]]) || '';
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
	// Frames the Python view folded (frames=python): 0 when it shows all.
	m.folded = Number(meta.framesFolded) || 0;
	if (Array.isArray(fb.sources)) {
		if (fb.sources.length !== fb.names.length)
			fail(`${fb.sources.length} sources for ${fb.names.length} names`);
		m.sources = fb.sources.map(String);
	}
	if (Array.isArray(fb.modules)) {
		if (fb.modules.length !== fb.names.length)
			fail(`${fb.modules.length} modules for ${fb.names.length} names`);
		m.modules = fb.modules.map(String);
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
// A tree whose root has d ([left total, left self, right total, right
// self], every node then having one) is laid out as a diff.
export function fromTree(root, unit, order = 'name') {
	const names = [], nameIdx = new Map(), levels = [];
	const stack = [[root, 0, 0]];
	while (stack.length) {
		const [node, d, x] = stack.pop();
		if (!nameIdx.has(node.name)) {
			nameIdx.set(node.name, names.length);
			names.push(node.name);
		}
		(levels[d] || (levels[d] = [])).push([x, node.total, node.self, nameIdx.get(node.name), node.d]);
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
	const D = root.d ? {
		lTotal: new Float64Array(n), lSelf: new Float64Array(n),
		rTotal: new Float64Array(n), rSelf: new Float64Array(n),
		leftTicks: root.d[0], rightTicks: root.d[2],
	} : null;
	m.diff = D;
	const off = [0];
	let k = 0;
	for (let d = 0; d < levels.length; d++) {
		levels[d].sort((a, b) => a[0] - b[0]);
		for (const [x, t, s, ni, v] of levels[d]) {
			m.start[k] = x;
			m.total[k] = t;
			m.self[k] = s;
			m.name[k] = ni;
			m.depth[k] = d;
			if (D)
				[D.lTotal[k], D.lSelf[k], D.rTotal[k], D.rSelf[k]] = v;
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

// ---- paths and transforms ---------------------------------------------------------

// The path of node i: the names from the root's child down to it ([] for
// the root), as the URL keeps a zoomed node.
export function pathOf(m, i) {
	const path = [];
	for (let a = i; a > 0; a = m.parent[a])
		path.push(m.nameOf(a));
	return path.reverse();
}

// The node at path (pathOf's form), or -1. Where siblings share a name
// (a function named "other" beside the server's "other"), the first.
export function findPath(m, path) {
	if (!m.n || !Array.isArray(path))
		return -1;
	let i = 0;
	for (const name of path) {
		const ni = m.names.indexOf(String(name));
		let next = -1;
		for (let c = m.childFirst[i], e = c + m.childCount[i]; c < e && next < 0; c++)
			if (m.name[c] === ni)
				next = c;
		if (next < 0)
			return -1;
		i = next;
	}
	return i;
}

// The transforms build a call tree from m and lay it out again: nodes
// carry m's values (total, self, and a diff's four in d), and the result
// keeps m's unit, sources and modules.
function newNode(m, name) {
	const t = treeNode(name);
	if (m.diff)
		t.d = [0, 0, 0, 0];
	return t;
}

function kid(m, t, name) {
	let c = t.kids.get(name);
	if (!c) {
		c = newNode(m, name);
		t.kids.set(name, c);
	}
	return c;
}

function addTotal(t, m, i) {
	t.total += m.total[i];
	if (t.d) {
		t.d[0] += m.diff.lTotal[i];
		t.d[2] += m.diff.rTotal[i];
	}
}

// Node i's self added to t's self; with whole, its total (a collapse).
function addSelf(t, m, i, whole = false) {
	const D = m.diff;
	t.self += whole ? m.total[i] : m.self[i];
	if (t.d) {
		t.d[1] += whole ? D.lTotal[i] : D.lSelf[i];
		t.d[3] += whole ? D.rTotal[i] : D.rSelf[i];
	}
}

// Node i's children and what lies below them, merged under t.
function addBelow(t, m, i) {
	for (let c = m.childFirst[i], e = c + m.childCount[i]; c < e; c++) {
		const k = kid(m, t, m.nameOf(c));
		addTotal(k, m, c);
		addSelf(k, m, c);
		addBelow(k, m, c);
	}
}

function layout(m, root) {
	const out = fromTree(root, m.unit);
	const per = (arr) => {
		if (!arr)
			return null;
		const by = new Map(m.names.map((n, k) => [n, arr[k]]));
		return out.names.map((n) => by.get(n) || '');
	};
	out.sources = per(m.sources);
	out.modules = per(m.modules);
	return out;
}

// Node i re-rooted: the root (of i's total) over i and what lies below it.
function rerooted(m, i) {
	const root = newNode(m, m.nameOf(0));
	const f = kid(m, root, m.nameOf(i));
	addTotal(root, m, i);
	addTotal(f, m, i);
	addSelf(f, m, i);
	addBelow(f, m, i);
	return layout(m, root);
}

// Focus on function name (pprof's -focus, Pyroscope's "focus on subtree"):
// only the stacks through it, each cut above it, so that the root holds
// one node, name, over its callees merged. Recursion counts once: only the
// outermost calls are taken, what they call again stays below them. null
// when no node below the root is name.
export function focus(m, name) {
	const fi = m.names.indexOf(name);
	if (fi < 0 || !m.n)
		return null;
	const root = newNode(m, m.nameOf(0));
	const f = kid(m, root, name);
	const inside = new Uint8Array(m.n);
	let found = false;
	for (let i = 1; i < m.n; i++) {
		const p = m.parent[i];
		const hit = m.name[i] === fi;
		inside[i] = hit || inside[p];
		if (!hit || inside[p])
			continue;
		found = true;
		addTotal(root, m, i);
		addTotal(f, m, i);
		addSelf(f, m, i);
		addBelow(f, m, i);
	}
	return found ? layout(m, root) : null;
}

// Focus on one node, given by its path (pathOf's form): the root over it
// and what lies below it. null when no node has that path (or it is the
// root's).
export function focusPath(m, path) {
	const i = findPath(m, path);
	return i > 0 ? rerooted(m, i) : null;
}

// Hides the functions of names (pprof's -hide): their frames are taken out
// of every stack, so that what they call is merged into their caller and
// their self time becomes their caller's. The root is never hidden.
export function hide(m, names) {
	if (!m.n)
		return m;
	const want = new Set(names);
	const hidden = m.names.map((n) => want.has(n));
	const root = newNode(m, m.nameOf(0));
	addTotal(root, m, 0);
	addSelf(root, m, 0);
	const to = new Array(m.n);
	to[0] = root;
	for (let i = 1; i < m.n; i++) {
		const dst = to[m.parent[i]];
		if (hidden[m.name[i]]) {
			addSelf(dst, m, i);
			to[i] = dst;
			continue;
		}
		const c = kid(m, dst, m.nameOf(i));
		addTotal(c, m, i);
		addSelf(c, m, i);
		to[i] = c;
	}
	return layout(m, root);
}

// Collapses function name into itself: each outermost call of it keeps its
// total, all of it self, and nothing below it (what it calls, itself
// again included, is folded in). The root is never collapsed.
export function collapse(m, name) {
	if (!m.n)
		return m;
	const fi = m.names.indexOf(name);
	const root = newNode(m, m.nameOf(0));
	addTotal(root, m, 0);
	addSelf(root, m, 0);
	const to = new Array(m.n);
	to[0] = root;
	for (let i = 1; i < m.n; i++) {
		const dst = to[m.parent[i]];
		if (!dst)
			continue; // below a collapsed call
		const c = kid(m, dst, m.nameOf(i));
		addTotal(c, m, i);
		if (m.name[i] === fi) {
			addSelf(c, m, i, true);
			continue;
		}
		addSelf(c, m, i);
		to[i] = c;
	}
	return layout(m, root);
}
