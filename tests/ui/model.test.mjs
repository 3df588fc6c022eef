// model.test.mjs: unit tests of the UI's flame graph model (ui/js/model.js),
// run with `node --test` by tests/integration/test_ui.py before the browser
// tests: flamebearer decoding (single and diff) and its rejection of
// malformed answers, search shares, sandwich callers/callees with recursion,
// tree layout, node paths, and the focus / hide / collapse transforms (exact
// trees, recursion, diffs).

import test from 'node:test';
import assert from 'node:assert/strict';
import { fromFlamebearer, fromTree, treeNode, treeChild, nameMatcher, search, sandwich, pathOf,
	findPath, focus, focusPath, hide, collapse } from '../../ui/js/model.js';

// main;a;b 30, main;a 10, main;c;a;b 20, main;c 40.
const FB = {
	version: 1,
	flamebearer: {
		names: ['total', 'main', 'a', 'c', 'b'],
		levels: [[0, 100, 0, 0], [0, 100, 0, 1], [0, 40, 10, 2, 0, 60, 40, 3], [0, 30, 30, 4, 10, 20, 0, 2],
			 [40, 20, 20, 4]],
		numTicks: 100, maxSelf: 40,
	},
	metadata: { format: 'single', units: 'samples' },
};

test('decodes a flamebearer: starts, parents, children', () => {
	const m = fromFlamebearer(FB);
	assert.equal(m.n, 7);
	assert.equal(m.levels, 5);
	assert.equal(m.numTicks, 100);
	const at = (d, name) => {
		for (let i = m.levelOff[d]; i < m.levelOff[d + 1]; i++)
			if (m.nameOf(i) === name)
				return i;
		return -1;
	};
	const c = at(2, 'c'), ca = at(3, 'a'), cab = at(4, 'b');
	assert.equal(m.start[c], 40);
	assert.equal(m.start[ca], 40);
	assert.equal(m.start[cab], 40);
	assert.equal(m.nameOf(m.parent[cab]), 'a');
	assert.equal(m.parent[ca], c);
	assert.equal(m.childCount[c], 1);
	assert.equal(m.nodeAt(2, 45), c);
	assert.equal(m.nodeAt(4, 10), -1);
	assert.equal(m.unit, 'samples');
});

test('sources: where each node\'s function is, by name; a length mismatch is rejected', () => {
	const fb = structuredClone(FB);
	fb.flamebearer.sources = ['', '/src/app.c:51', '/src/app.c:33', '', 'app.py:12'];
	const m = fromFlamebearer(fb);
	const byName = {};
	for (let i = 0; i < m.n; i++)
		byName[m.nameOf(i)] = m.sourceOf(i);
	assert.equal(byName.main, '/src/app.c:51');
	assert.equal(byName.a, '/src/app.c:33');
	assert.equal(byName.b, 'app.py:12');
	assert.equal(byName.c, '');
	assert.equal(fromFlamebearer(FB).sourceOf(1), '');
	fb.flamebearer.sources.pop();
	assert.throws(() => fromFlamebearer(fb), /4 sources for 5 names/);
});

test('modules: each node\'s module, by name; a length mismatch is rejected', () => {
	const fb = structuredClone(FB);
	fb.flamebearer.modules = ['', 'app', 'libc.so.6', 'app', ''];
	const m = fromFlamebearer(fb);
	const byName = {};
	for (let i = 0; i < m.n; i++)
		byName[m.nameOf(i)] = m.moduleOf(i);
	assert.deepEqual(byName, { total: '', main: 'app', a: 'libc.so.6', c: 'app', b: '' });
	assert.equal(fromFlamebearer(FB).moduleOf(1), '');
	fb.flamebearer.modules.push('x');
	assert.throws(() => fromFlamebearer(fb), /6 modules for 5 names/);
});

test('rejects malformed flame graphs with a message', () => {
	const bad = (fb, re) => assert.throws(() => fromFlamebearer({ flamebearer: fb, metadata: {} }), re);
	bad(null, /no flamebearer/);
	bad({ names: ['total'], levels: [[0, 1, 0]] }, /multiple of 4/);
	bad({ names: ['total'], levels: [[0, 1, 0, 3]] }, /name index 3/);
	bad({ names: ['total'], levels: [[0, -1, 0, 0]] }, /not a count/);
	bad({ names: ['total'], levels: [[0, 'x', 0, 0]] }, /not a count/);
	bad({ names: ['total', 'a'], levels: [[0, 10, 0, 0], [5, 10, 0, 1]] }, /outside every node/);
	bad({ names: ['total', 'a'], levels: [[0, 10, 0, 0, 0, 5, 0, 1]] }, /root alone/);
	const empty = fromFlamebearer({ flamebearer: { names: [], levels: [] }, metadata: {} });
	assert.equal(empty.numTicks, 0);
});

test('decodes a diff: left and right side by side', () => {
	const m = fromFlamebearer({
		flamebearer: { names: ['total', 'x', 'y'], leftTicks: 10, rightTicks: 20,
			       levels: [[0, 10, 0, 0, 20, 0, 0], [0, 6, 6, 0, 5, 5, 1, 0, 4, 4, 0, 15, 15, 2]] },
		metadata: { format: 'double', units: 'samples' },
	});
	assert.equal(m.numTicks, 30);
	assert.equal(m.diff.leftTicks, 10);
	assert.equal(m.diff.rightTicks, 20);
	assert.equal(m.start[2], 11, 'y starts after x on both sides');
	assert.equal(m.total[2], 19);
	assert.equal(m.diff.rTotal[2], 15);
});

test('search counts a stack once even when several frames match', () => {
	const m = fromFlamebearer(FB);
	const r = search(m, nameMatcher('a'));
	// a (40) and c;a (20); main is matched too by "a" -- so use exact regex.
	assert.equal(r.ticks, 100, '"a" matches main, which covers everything');
	const exact = search(m, nameMatcher('/^a$/'));
	assert.equal(exact.ticks, 60);
	assert.equal(exact.count, 2);
	assert.equal(exact.functions, 1);
	const ab = search(m, nameMatcher('/^(a|b)$/'));
	assert.equal(ab.ticks, 60, 'b under a is not counted again');
	assert.throws(() => nameMatcher('/(/'), /bad regular expression/);
	assert.equal(nameMatcher('  '), null);
});

test('sandwich: callers inverted, callees merged, recursion once', () => {
	const m = fromFlamebearer(FB);
	const s = sandwich(m, 'a');
	assert.equal(s.total, 60);
	const names = (mm) => Array.from({ length: mm.n }, (_, i) => `${mm.depth[i]}:${mm.nameOf(i)}:${mm.total[i]}`);
	assert.deepEqual(names(s.callees), ['0:a:60', '1:b:50']);
	assert.deepEqual(names(s.callers), ['0:a:60', '1:c:20', '1:main:40', '2:main:20']);
	// Recursion: r;r;x 10 -- r counts 10, not 20.
	const root = treeNode('total');
	root.total = 10;
	const r1 = treeChild(root, 'r');
	r1.total = 10;
	const r2 = treeChild(r1, 'r');
	r2.total = 10;
	const x = treeChild(r2, 'x');
	x.total = 10;
	x.self = 10;
	const rec = sandwich(fromTree(root, 'samples'), 'r');
	assert.equal(rec.total, 10);
	assert.deepEqual(names(rec.callees), ['0:r:10', '1:r:10', '2:x:10']);
	assert.equal(sandwich(m, 'nope'), null);
});

test('tree layout: by name, or heaviest first', () => {
	const root = treeNode('total');
	for (const [n, v] of [['z', 5], ['a', 1], ['m', 3]]) {
		const c = treeChild(root, n);
		c.total = c.self = v;
		root.total += v;
	}
	const byName = fromTree(root, '');
	assert.deepEqual([1, 2, 3].map((i) => byName.nameOf(i)), ['a', 'm', 'z']);
	assert.deepEqual([1, 2, 3].map((i) => byName.start[i]), [0, 1, 4]);
	const heavy = fromTree(root, '', 'weight');
	assert.deepEqual([1, 2, 3].map((i) => heavy.nameOf(i)), ['z', 'm', 'a']);
});

// ---- paths and transforms -----------------------------------------------------------

// Every node as depth:name:total:self, level by level, left to right.
const shape = (mm) => Array.from({ length: mm.n }, (_, i) =>
	`${mm.depth[i]}:${mm.nameOf(i)}:${mm.total[i]}:${mm.self[i]}`);

// r;r;x 10, r;r 3, r;y 5: r calls itself.
function recursive() {
	const root = treeNode('total');
	root.total = 18;
	const r1 = treeChild(root, 'r');
	r1.total = 18;
	const r2 = treeChild(r1, 'r');
	r2.total = 13;
	r2.self = 3;
	const x = treeChild(r2, 'x');
	x.total = x.self = 10;
	const y = treeChild(r1, 'y');
	y.total = y.self = 5;
	return fromTree(root, 'samples');
}

test('paths: every node found again from its path of names', () => {
	const m = fromFlamebearer(FB);
	for (let i = 0; i < m.n; i++)
		assert.equal(findPath(m, pathOf(m, i)), i, `node ${i}: ${pathOf(m, i)}`);
	assert.deepEqual(pathOf(m, 0), []);
	assert.deepEqual(pathOf(m, m.n - 1), ['main', 'c', 'a', 'b']);
	assert.equal(findPath(m, ['main', 'nope']), -1);
	assert.equal(findPath(m, ['a']), -1, 'a path starts below the root');
	assert.equal(findPath(m, 'main'), -1, 'not an array');
	const r = recursive();
	assert.equal(r.nameOf(findPath(r, ['r', 'r', 'x'])), 'x');
});

test('focus: the stacks through a function, re-rooted at it, recursion once', () => {
	const m = fromFlamebearer(FB);
	assert.deepEqual(shape(focus(m, 'a')), ['0:total:60:0', '1:a:60:10', '2:b:50:50']);
	assert.deepEqual(shape(focus(m, 'c')), ['0:total:60:0', '1:c:60:40', '2:a:20:0', '3:b:20:20']);
	assert.deepEqual(shape(focus(m, 'main')), shape(m), 'focus on what everything runs through');
	assert.equal(focus(m, 'nope'), null);
	assert.equal(focus(m, 'total'), null, 'the root is no function');
	assert.equal(focus(m, 'a').numTicks, 60);
	assert.deepEqual(shape(focus(recursive(), 'r')),
			 ['0:total:18:0', '1:r:18:0', '2:r:13:3', '2:y:5:5', '3:x:10:10']);
});

test('focusPath: one node re-rooted, not the other calls of its function', () => {
	const m = fromFlamebearer(FB);
	assert.deepEqual(shape(focusPath(m, ['main', 'c'])),
			 ['0:total:60:0', '1:c:60:40', '2:a:20:0', '3:b:20:20']);
	assert.deepEqual(shape(focusPath(m, ['main', 'c', 'a'])), ['0:total:20:0', '1:a:20:0', '2:b:20:20']);
	assert.deepEqual(shape(focusPath(m, ['main', 'a'])), ['0:total:40:0', '1:a:40:10', '2:b:30:30']);
	assert.equal(focusPath(m, ['main', 'x']), null);
	assert.equal(focusPath(m, []), null);
	assert.deepEqual(shape(focusPath(recursive(), ['r', 'r'])), ['0:total:13:0', '1:r:13:3', '2:x:10:10']);
});

test('hide: the frames taken out, their callees merged into their callers', () => {
	const m = fromFlamebearer(FB);
	assert.deepEqual(shape(hide(m, ['a'])),
			 ['0:total:100:0', '1:main:100:10', '2:b:30:30', '2:c:60:40', '3:b:20:20']);
	assert.deepEqual(shape(hide(m, ['main'])),
			 ['0:total:100:0', '1:a:40:10', '1:c:60:40', '2:b:30:30', '2:a:20:0', '3:b:20:20']);
	assert.deepEqual(shape(hide(m, new Set(['a', 'b']))), ['0:total:100:0', '1:main:100:40', '2:c:60:60']);
	assert.deepEqual(shape(hide(m, [])), shape(m));
	assert.deepEqual(shape(hide(m, ['total'])), shape(m), 'the root stays');
	// Recursion: both r frames go; a stack of r alone is left empty (root self).
	assert.deepEqual(shape(hide(recursive(), ['r'])), ['0:total:18:3', '1:x:10:10', '1:y:5:5']);
});

test('collapse: a function\'s callees folded into its self time', () => {
	const m = fromFlamebearer(FB);
	assert.deepEqual(shape(collapse(m, 'a')),
			 ['0:total:100:0', '1:main:100:0', '2:a:40:40', '2:c:60:40', '3:a:20:20']);
	assert.deepEqual(shape(collapse(m, 'c')),
			 ['0:total:100:0', '1:main:100:0', '2:a:40:10', '2:c:60:60', '3:b:30:30']);
	assert.deepEqual(shape(collapse(m, 'main')), ['0:total:100:0', '1:main:100:100']);
	assert.deepEqual(shape(collapse(m, 'nope')), shape(m));
	assert.deepEqual(shape(collapse(recursive(), 'r')), ['0:total:18:0', '1:r:18:18']);
});

test('transforms keep a diff\'s sides, the unit, sources and modules', () => {
	const d = fromFlamebearer({
		flamebearer: { names: ['total', 'x', 'y'], leftTicks: 10, rightTicks: 20,
			       levels: [[0, 10, 0, 0, 20, 0, 0], [0, 6, 6, 0, 5, 5, 1, 0, 4, 4, 0, 15, 15, 2]] },
		metadata: { format: 'double', units: 'samples' },
	});
	const h = hide(d, ['x']);
	assert.deepEqual(shape(h), ['0:total:30:11', '1:y:19:19']);
	assert.deepEqual([h.diff.lTotal[0], h.diff.lSelf[0], h.diff.rTotal[0], h.diff.rSelf[0]], [10, 6, 20, 5]);
	assert.deepEqual([h.diff.lTotal[1], h.diff.rTotal[1]], [4, 15]);
	assert.equal(h.diff.leftTicks, 10);
	assert.equal(h.diff.rightTicks, 20);
	const c = collapse(d, 'y');
	assert.deepEqual([c.diff.lSelf[2], c.diff.rSelf[2]], [4, 15]);
	const f = focus(d, 'y');
	assert.deepEqual([f.diff.leftTicks, f.diff.rightTicks], [4, 15]);
	const fb = structuredClone(FB);
	fb.flamebearer.sources = ['', '/src/app.c:51', '/src/app.c:33', '', 'app.py:12'];
	fb.flamebearer.modules = ['', 'app', 'libc.so.6', 'app', 'python3'];
	const m = hide(fromFlamebearer(fb), ['a']);
	assert.equal(m.unit, 'samples');
	const b = findPath(m, ['main', 'c', 'b']);
	assert.equal(m.sourceOf(b), 'app.py:12');
	assert.equal(m.moduleOf(b), 'python3');
	assert.equal(m.moduleOf(findPath(m, ['main'])), 'app');
	assert.equal(focus(fromFlamebearer(FB), 'a').sources, null);
});

// ---- malformed input: random mutations of valid answers and files --------------------

import { validate, buildTree } from '../../ui/js/speedscope-file.js';

function rng(seed) {
	let s = seed >>> 0;
	return () => {
		s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
		return s / 4294967296;
	};
}

const WEIRD = [null, undefined, -1, 0, 1, 1e308, NaN, 'x', '', [], {}, true, 2 ** 31, -0, 0.5, [1, 2]];

// Replaces, deletes or duplicates random parts of a JSON value.
function mutate(v, rand, depth = 0) {
	if (Array.isArray(v)) {
		const a = v.map((x) => (rand() < 0.7 ? mutate(x, rand, depth + 1) : x));
		if (rand() < 0.1)
			a.splice(Math.floor(rand() * (a.length + 1)), 1);
		if (rand() < 0.1)
			a.push(WEIRD[Math.floor(rand() * WEIRD.length)]);
		return a;
	}
	if (v && typeof v === 'object') {
		const o = {};
		for (const [k, x] of Object.entries(v))
			if (rand() > 0.05)
				o[k] = rand() < 0.7 ? mutate(x, rand, depth + 1) : x;
		return o;
	}
	return rand() < 0.08 ? WEIRD[Math.floor(rand() * WEIRD.length)] : v;
}

test('malformed flame graphs are rejected with an Error, never a crash or a bad model', () => {
	const rand = rng(42);
	let rejected = 0, accepted = 0;
	for (let k = 0; k < 3000; k++) {
		const fb = mutate(FB, rand);
		let m;
		try {
			m = fromFlamebearer(fb);
		} catch (e) {
			assert.ok(e instanceof Error && e.constructor === Error, `a plain Error: ${e}`);
			assert.match(e.message, /malformed flame graph|lies outside/);
			rejected++;
			continue;
		}
		accepted++;
		// What is accepted is consistent: children inside their parent.
		for (let i = 1; i < m.n; i++) {
			const p = m.parent[i];
			assert.ok(m.start[i] >= m.start[p] && m.start[i] + m.total[i] <= m.start[p] + m.total[p]);
		}
		search(m, nameMatcher('a'));
		if (m.n) {
			const fn = m.nameOf(m.n - 1);
			sandwich(m, fn);
			// The transforms of what is accepted are models too.
			for (const t of [focus(m, fn), hide(m, [fn]), collapse(m, fn),
					 focusPath(m, pathOf(m, m.n - 1))])
				if (t)
					t.link();
		}
	}
	assert.ok(rejected > 100 && accepted > 100, `${rejected} rejected, ${accepted} accepted`);
});

const SS = {
	shared: { frames: [{ name: 'main' }, { name: 'a' }, { name: 'b' }] },
	profiles: [
		{ type: 'sampled', name: 's', unit: 'none', startValue: 0, endValue: 3,
		  samples: [[0, 1], [0, 1, 2], [0]], weights: [1, 2, 3] },
		{ type: 'evented', name: 'e', unit: 'milliseconds', startValue: 0, endValue: 10,
		  events: [{ type: 'O', frame: 0, at: 0 }, { type: 'O', frame: 1, at: 2 },
			   { type: 'C', frame: 1, at: 5 }, { type: 'C', frame: 0, at: 10 }] },
	],
};

test('speedscope files: sampled and evented profiles become call trees', () => {
	validate(SS);
	const t = buildTree(SS.profiles[0], SS.shared.frames, 'left');
	assert.equal(t.total, 6);
	assert.equal(t.kids.get('main').total, 6);
	assert.equal(t.kids.get('main').self, 3);
	assert.equal(t.kids.get('main').kids.get('a').kids.get('b').total, 2);
	const e = buildTree(SS.profiles[1], SS.shared.frames, 'left');
	assert.equal(e.total, 10);
	assert.equal(e.kids.get('main').self, 7);
	assert.equal(e.kids.get('main').kids.get('a').total, 3);
	const m = fromTree(t, '', 'weight');
	assert.equal(m.numTicks, 6);
});

test('malformed speedscope files are rejected with a message, never a crash', () => {
	const rand = rng(7);
	let rejected = 0;
	for (let k = 0; k < 3000; k++) {
		const f = mutate(SS, rand);
		try {
			validate(f);
		} catch (e) {
			assert.ok(e instanceof Error && e.constructor === Error, `a plain Error: ${e}`);
			rejected++;
			continue;
		}
		for (const p of f.profiles) {
			let t;
			try {
				t = buildTree(p, f.shared.frames, rand() < 0.5 ? 'left' : 'time');
			} catch (e) {
				assert.match(e.message, /overflow/);
				continue;
			}
			fromTree(t, '');
		}
	}
	assert.ok(rejected > 100, `${rejected} rejected`);
});
