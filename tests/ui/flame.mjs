// flame.mjs: the browser tests of the flame graph itself (ui/js/flamegraph.js
// over ui/js/model.js), registered with harness.mjs's runner; imported by
// run.mjs. The node menu (focus, hide, collapse, sandwich, copy) by mouse and
// by keyboard, the zoom as a path, colour by module, a Python frame's
// tooltip, and the dark theme's colours. The menu's tests drive a flame graph
// of their own over the profile view's model, its callbacks applying
// model.js's transforms, and check what is drawn against testdata.py's truth.

import assert from 'node:assert/strict';
import { TRUTH, ROW, test, Q, RANGE, page, frames, find, near, go, shot, flame, one, pixel, idle }
	from './harness.mjs';

const FNS = TRUTH.functions;
const CHAIN = TRUTH.chain; // total, __libc_start_call_main, main, run
const RUN = CHAIN[CHAIN.length - 1];

// Opens the shares profile and puts beside it a flame graph of its model
// (window.__sonde.flames.test) whose menu callbacks redraw it with
// model.js's focus, hide and collapse and record every call in
// window.__flameTest.calls. Returns what it drew.
async function ownGraph(service = TRUTH.service) {
	await go({ query: Q(service), ...RANGE, view: 'flame' });
	await page.evaluate(async () => {
		const { FlameGraph } = await import('/js/flamegraph.js');
		const M = await import('/js/model.js');
		document.getElementById('flame-test')?.remove();
		const host = document.createElement('div');
		host.id = 'flame-test';
		host.style.cssText = 'width:1000px;margin:20px';
		document.body.append(host);
		const T = window.__flameTest = { calls: [], base: window.__sonde.flame.model, M };
		const f = new FlameGraph(host, {
			onFocus: (n) => {
				T.calls.push(['focus', n]);
				f.setModel(M.focus(f.model, n));
			},
			onHide: (n) => {
				T.calls.push(['hide', n]);
				f.setModel(M.hide(f.model, [n]));
			},
			onCollapse: (n) => {
				T.calls.push(['collapse', n]);
				f.setModel(M.collapse(f.model, n));
			},
			onSandwich: (n) => T.calls.push(['sandwich', n]),
			onZoom: (p) => T.calls.push(['zoom', p]),
		});
		T.flame = f;
		window.__sonde.flames.test = f;
		f.setModel(T.base);
	});
	return flame('test');
}

const calls = () => page.evaluate(() => window.__flameTest.calls.splice(0));
const menuOpen = () => page.evaluate(() =>
	[...document.querySelectorAll('.flame-menu')].filter((m) => !m.hidden).length);
const menuItems = () => page.$$eval('.flame-menu:not([hidden]) [role=menuitem]',
	(b) => b.map((x) => x.dataset.action));

async function rightClick(f, name) {
	const r = one(f, name);
	await page.mouse.click(f.box.x + r.x + Math.min(r.w / 2, 30), f.box.y + r.y + ROW / 2,
		{ button: 'right' });
	await frames(page, 1);
}

async function pick(action) {
	await page.click(`.flame-menu:not([hidden]) [data-action="${action}"]`);
	await frames(page, 2);
}

// The drawn nodes are those of the model a transform gives: each at its
// depth, as wide as its share.
async function drawnAs(f, transform, arg) {
	const want = await page.evaluate(([t, a]) => {
		const T = window.__flameTest, m = T.M[t](T.base, a);
		return Array.from({ length: m.n }, (_, i) => ({ name: m.nameOf(i), depth: m.depth[i],
								share: m.total[i] / m.numTicks }));
	}, [transform, arg]);
	const named = f.rects.filter((r) => r.name !== null);
	assert.equal(named.length, want.length,
		     `${transform}(${arg}): ${want.length} nodes drawn (drawn: ${named.map((r) => r.name)})`);
	for (const w of want) {
		const r = named.find((x) => x.name === w.name && x.y === w.depth * ROW);
		assert.ok(r, `${transform}(${arg}): ${w.name} drawn at depth ${w.depth}`);
		near(r.w, w.share * f.width, 0.6, `${transform}(${arg}): width of ${w.name}`);
	}
}

test('flame graph: the node menu focuses, hides and collapses, as model.js says', async () => {
	let f = await ownGraph();
	await rightClick(f, RUN);
	assert.equal(await menuOpen(), 1, 'right-click opens the node menu');
	assert.deepEqual(await menuItems(), ['zoom', 'focus', 'hide', 'collapse', 'sandwich', 'copy']);
	await shot('16-flame-menu');
	await pick('focus');
	assert.deepEqual(await calls(), [['focus', RUN]]);
	f = await flame('test');
	await drawnAs(f, 'focus', RUN);
	// Focused on run: the root over run, its callees as wide as their share.
	assert.equal(one(f, RUN).y, ROW, 'run right under the root');
	assert.equal(find(f, 'main').length, 0, 'its callers are gone');
	for (const [n, v] of Object.entries(FNS))
		near(one(f, n).w, v / TRUTH.total * f.width, 0.6, `${n} under the focused run`);

	f = await ownGraph();
	await rightClick(f, RUN);
	await pick('hide');
	assert.deepEqual(await calls(), [['hide', RUN]]);
	f = await flame('test');
	await drawnAs(f, 'hide', [RUN]);
	assert.equal(find(f, RUN).length, 0, 'run is hidden');
	for (const n of Object.keys(FNS))
		assert.equal(one(f, n).y, (CHAIN.length - 1) * ROW, `${n} moves up under main`);

	f = await ownGraph();
	await rightClick(f, 'main');
	await pick('collapse');
	assert.deepEqual(await calls(), [['collapse', 'main']]);
	f = await flame('test');
	await drawnAs(f, 'collapse', 'main');
	assert.equal(f.levels, 3, 'nothing below the collapsed main');
	assert.equal(one(f, 'main').self, TRUTH.total, 'main\'s callees are its self time');
	await shot('17-flame-collapsed');

	// Sandwich and copy; Zoom zooms; a click elsewhere closes the menu.
	f = await ownGraph();
	await rightClick(f, TRUTH.hottest);
	await pick('sandwich');
	assert.deepEqual(await calls(), [['sandwich', TRUTH.hottest]]);
	await rightClick(f, 'main');
	await pick('copy');
	assert.equal(await page.evaluate(() => window.__flameTest.flame.copied), 'main');
	await rightClick(f, RUN);
	await pick('zoom');
	assert.deepEqual(await calls(), [['zoom', CHAIN.slice(1)]]);
	f = await flame('test');
	await rightClick(f, 'main');
	assert.equal(await menuOpen(), 1);
	await page.mouse.click(5, 5);
	assert.equal(await menuOpen(), 0, 'a click elsewhere closes the menu');
	// Alt-click still opens the sandwich.
	const r = one(f, TRUTH.hottest);
	await page.keyboard.down('Alt');
	await page.mouse.click(f.box.x + r.x + r.w / 2, f.box.y + r.y + ROW / 2);
	await page.keyboard.up('Alt');
	assert.deepEqual(await calls(), [['sandwich', TRUTH.hottest]]);
	// Only the items whose callbacks the view gives.
	await page.evaluate(() => {
		window.__flameTest.flame.opts = {};
	});
	await rightClick(f, 'main');
	assert.deepEqual(await menuItems(), ['zoom', 'copy'], 'no callbacks, no such items');
	await page.keyboard.press('Escape');
	assert.equal(await menuOpen(), 0, 'Escape closes the menu');
});

test('flame graph: the keyboard moves between frames, zooms and opens the menu', async () => {
	let f = await ownGraph();
	const focused = () => page.evaluate(() => ({
		canvas: document.activeElement === window.__flameTest.flame.canvas,
		item: document.activeElement?.dataset?.action || null,
		sel: window.__flameTest.flame.sel >= 0
			? window.__flameTest.flame.model.nameOf(window.__flameTest.flame.sel) : null,
		tip: window.__flameTest.flame.tip.hidden ? '' : window.__flameTest.flame.tip.innerText,
	}));
	assert.equal(await page.evaluate(() => window.__flameTest.flame.canvas.tabIndex), 0, 'focusable');
	await page.evaluate(() => window.__flameTest.flame.canvas.focus());
	assert.equal((await focused()).sel, 'total', 'focus selects the root');
	// Down the widest path: the chain, then the hottest function.
	for (const name of [...CHAIN.slice(1), TRUTH.hottest]) {
		await page.keyboard.press('ArrowDown');
		const s = await focused();
		assert.equal(s.sel, name, 'ArrowDown goes to the widest child');
		assert.ok(s.tip.includes(name), `the tooltip shows ${name}: ${s.tip}`);
	}
	await page.keyboard.press('ArrowRight');
	const right = (await focused()).sel;
	assert.ok(right !== TRUTH.hottest && right in FNS, `ArrowRight: a sibling (${right})`);
	await page.keyboard.press('ArrowLeft');
	assert.equal((await focused()).sel, TRUTH.hottest);
	await page.keyboard.press('Enter');
	await frames(page, 2);
	assert.deepEqual(await calls(), [['zoom', [...CHAIN.slice(1), TRUTH.hottest]]], 'Enter zooms');
	f = await flame('test');
	near(one(f, TRUTH.hottest).w, f.width, 0.01, 'the zoomed node spans the width');
	await page.keyboard.press('ArrowUp');
	assert.equal((await focused()).sel, RUN, 'ArrowUp: the caller');
	// Shift+F10 opens run's menu, the arrows move in it, Escape gives the
	// canvas back.
	await page.keyboard.press('Shift+F10');
	assert.equal(await menuOpen(), 1);
	assert.equal((await focused()).item, 'zoom', 'the first item has the focus');
	await page.keyboard.press('ArrowDown');
	assert.equal((await focused()).item, 'focus');
	await page.keyboard.press('ArrowUp');
	await page.keyboard.press('ArrowUp');
	assert.equal((await focused()).item, 'copy', 'ArrowUp wraps to the last');
	await page.keyboard.press('Escape');
	assert.equal(await menuOpen(), 0);
	assert.ok((await focused()).canvas, 'the canvas has the focus again');
	// The menu key, down to Hide, Enter.
	await page.keyboard.press('ContextMenu');
	await page.keyboard.press('ArrowDown');
	await page.keyboard.press('ArrowDown');
	assert.equal((await focused()).item, 'hide');
	await page.keyboard.press('Enter');
	await frames(page, 2);
	assert.deepEqual(await calls(), [['hide', RUN]]);
	f = await flame('test');
	assert.equal(find(f, RUN).length, 0, 'run hidden from the keyboard');
});

test('flame graph: zoomTo(path) and zoomPath() round-trip, onZoom tells the path', async () => {
	await go({ query: Q(TRUTH.service), ...RANGE, view: 'flame' });
	const path = [...CHAIN.slice(1), TRUTH.hottest];
	assert.equal(await page.evaluate(() => window.__sonde.flame.zoomPath()), null, 'not zoomed: null');
	assert.equal(await page.evaluate((p) => window.__sonde.flame.zoomTo(p), path), true);
	await frames(page, 2);
	let f = await flame();
	near(one(f, TRUTH.hottest).w, f.width, 0.01, 'zoomTo(path) zooms to that node');
	assert.deepEqual(await page.evaluate(() => window.__sonde.flame.zoomPath()), path);
	assert.equal(await page.evaluate(() => window.__sonde.flame.zoomTo(['main', 'nope'])), false,
		     'a path that is not there');
	assert.deepEqual(await page.evaluate(() => window.__sonde.flame.zoomPath()), path, 'zoom kept');
	// A click tells onZoom the new path; zoomTo(path, false) does not.
	f = await ownGraph();
	const r = one(f, RUN);
	await page.mouse.click(f.box.x + r.x + r.w / 2, f.box.y + r.y + ROW / 2);
	assert.deepEqual(await calls(), [['zoom', CHAIN.slice(1)]]);
	assert.deepEqual(await page.evaluate(() => window.__flameTest.flame.zoomPath()), CHAIN.slice(1));
	assert.equal(await page.evaluate((p) => window.__flameTest.flame.zoomTo(p, false), path), true);
	assert.deepEqual(await calls(), []);
	await page.evaluate(() => window.__flameTest.flame.reset());
	assert.deepEqual(await calls(), [['zoom', null]], 'reset: null');
});

test('flame graph: colour by module, one colour per module, the tooltip names it', async () => {
	await go({ query: Q(TRUTH.py_service), ...RANGE, view: 'flame', frames: 'all' });
	await page.evaluate(() => window.__sonde.flame.setColorBy('module'));
	await frames(page, 2);
	const f = await flame();
	const mods = TRUTH.py_modules;
	const byModule = {};
	for (const [name, mod] of Object.entries(mods)) {
		const r = one(f, name);
		const px = (await pixel(r)).slice(0, 3).join(',');
		(byModule[mod] = byModule[mod] || new Set()).add(px);
	}
	for (const [mod, colours] of Object.entries(byModule))
		assert.equal(colours.size, 1, `the frames of ${mod} share a colour: ${[...colours]}`);
	const all = Object.values(byModule).map((s) => [...s][0]);
	assert.equal(new Set(all).size, all.length,
		     `each module its own colour: ${JSON.stringify(byModule)}`);
	const legend = await page.evaluate(() => window.__sonde.flame.moduleLegend().map((x) => x.module));
	assert.deepEqual(legend, [...new Set(Object.values(mods))].sort(), 'the legend lists the modules');
	await shot('18-flame-by-module');
	// By package again: main and _start (one module) differ.
	await page.evaluate(() => window.__sonde.flame.setColorBy('package'));
	await frames(page, 2);
	const g = await flame();
	assert.notDeepEqual(await pixel(one(g, 'main')), await pixel(one(g, '_start')),
			    'by package, two names of one module differ');
	assert.deepEqual(await page.evaluate(() => window.__sonde.flame.moduleLegend()), []);
});

test('flame graph: a Python frame\'s tooltip gives its file:line and module', async () => {
	await go({ query: Q(TRUTH.py_service), ...RANGE, view: 'flame', frames: 'all' });
	const f = await flame();
	const tipOf = async (name) => {
		const r = one(f, name);
		await page.mouse.move(f.box.x + r.x + r.w / 2, f.box.y + r.y + ROW / 2);
		await frames(page, 2);
		return page.evaluate(() => window.__sonde.flame.tip.innerText);
	};
	for (const [name, where] of Object.entries(TRUTH.py_lines)) {
		const tip = await tipOf(name);
		assert.ok(tip.includes(where), `${name}'s tooltip says ${where}: ${tip}`);
		assert.match(tip, new RegExp(`Module\\s+${TRUTH.py_modules[name].replace('.', '\\.')}`),
			     `${name}'s tooltip names its file as its module: ${tip}`);
	}
	const tip = await tipOf('Py_RunMain');
	assert.match(tip, /Module\s+libpython3\.12\.so\.1\.0/, `a native frame's module: ${tip}`);
	assert.ok(!(await tipOf('total')).includes('Module'), 'the root has no module');
	await shot('19-flame-python-tooltip');
});

test('a Python job reads as py-spy shows it: its frames and what they call, one switch from all', async () => {
	const native = Object.keys(TRUTH.py_modules).filter((n) => !TRUTH.py_lines[n]);
	await go({ query: Q(TRUTH.py_service), ...RANGE, view: 'both' });
	let f = await flame();
	for (const n of native)
		assert.equal(find(f, n).length, 0, `the interpreter's ${n} folded in the Python view`);
	const top = one(f, '<module> (train.py)');
	assert.equal(top.y, one(f, 'total').y + ROW, 'the outermost Python frame right under the root');
	assert.equal(f.numTicks, TRUTH.py_total, 'nothing lost by folding');
	const rows = await page.$$eval('#top-table tbody tr', (trs) => trs.map((tr) => tr.dataset.name));
	assert.ok(!rows.some((r) => native.includes(r)) && rows.includes('step (model.py)'),
		  `the table shows the same frames: ${rows}`);
	assert.equal(await page.$eval('#frames-toggle', (b) => b.getAttribute('aria-pressed')), 'true');
	await page.click('#frames-toggle');
	await idle();
	assert.equal(new URL(page.url()).searchParams.get('frames'), 'all');
	f = await flame();
	for (const n of native)
		assert.equal(find(f, n).length, 1, `${n} drawn with all frames`);
	assert.equal(await page.$eval('#frames-toggle', (b) => b.getAttribute('aria-pressed')), 'false');
	// A service without Python frames: no switch (nothing to fold).
	await go({ query: Q(TRUTH.service), ...RANGE, view: 'flame' });
	assert.equal(await page.$('#frames-toggle'), null, 'no switch where nothing folds');
	await shot('19b-python-view');
});

test('flame graph: the theme\'s colours from the CSS variables, redrawn on sonde-theme', async () => {
	await go({ query: Q(TRUTH.service), ...RANGE, view: 'flame', search: TRUTH.hottest });
	await frames(page, 2);
	const lum = (p) => 0.2126 * p[0] + 0.7152 * p[1] + 0.0722 * p[2];
	let f = await flame();
	const other = Object.keys(FNS).find((n) => n !== TRUTH.hottest);
	const lightLit = await pixel(one(f, TRUTH.hottest));
	const lightDim = await pixel(one(f, other));
	const setTheme = (vars) => page.evaluate((v) => {
		for (const [k, x] of Object.entries(v))
			if (x)
				document.documentElement.style.setProperty(k, x);
			else
				document.documentElement.style.removeProperty(k);
		window.dispatchEvent(new Event('sonde-theme'));
	}, vars);
	await setTheme({ '--panel': '#15151c', '--ink': '#e8e8f0', '--line': '#30303c',
			 '--muted': '#9090a0' });
	await frames(page, 2);
	f = await flame();
	const pal = await page.evaluate(() => window.__sonde.flame.palette);
	assert.equal(pal.dark, true, 'a dark panel is a dark theme');
	assert.equal(pal.text, '#e8e8f0', 'labels in --ink');
	const dim = await pixel(one(f, other));
	assert.deepEqual(dim.slice(0, 3), [0x30, 0x30, 0x3c], 'what the search leaves out in --line');
	const lit = await pixel(one(f, TRUTH.hottest));
	assert.ok(lum(lit) < lum(lightLit) - 40, `frames darker on a dark page: ${lit} vs ${lightLit}`);
	await shot('20-flame-dark');
	await setTheme({ '--panel': '', '--ink': '', '--line': '', '--muted': '' });
	await frames(page, 2);
	f = await flame();
	assert.deepEqual(await pixel(one(f, TRUTH.hottest)), lightLit, 'light again');
	assert.deepEqual(await pixel(one(f, other)), lightDim);
});
