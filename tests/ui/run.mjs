// run.mjs: the browser tests of Sonde's web UI. Drives Debian's Chromium
// through playwright-core (harness.mjs) against a running server that holds
// the data of testdata.py, checks what the UI shows against that data's
// truth, keeps screenshots, and measures how smoothly a 100 000-node flame
// graph draws. Run by tests/integration/test_ui.py, which starts the server
// and loads the data. Environment: SONDE_URL (the server), SONDE_UI_TRUTH
// (testdata.py's truth, JSON), SONDE_UI_ARTIFACTS (where screenshots and
// downloads go), SONDE_UI_ONLY (a substring: run only the tests whose name
// has it).

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { parsePprof } from './pprof.mjs';
import { generateFlamebearer } from './bigflame.mjs';
import { BASE, TRUTH, ART, ROW, test, pct, Q, RANGE, context, page, frames, find, near, url, idle,
	 go, shot, flame, one, pixel, hover, checkGeometry, runAll } from './harness.mjs';

// ---- the tests --------------------------------------------------------------------------

test('the UI opens on the busiest process with a range fitted to the data, and no network beyond the server', async () => {
	await go({});
	assert.equal(await page.title(), 'Sonde');
	const services = await page.$$eval('#dl-service option', (o) => o.map((x) => x.value));
	assert.ok(services.includes(TRUTH.service) && services.includes(TRUTH.other_service),
		  `services offered: ${services}`);
	const types = await page.$$eval('#pick-type option', (o) => o.map((x) => x.value));
	assert.ok(types.includes('cpu') && types.includes('gpu_launch'), `types offered: ${types}`);
	assert.equal(await page.$eval('#pick-type', (s) => s.value), 'cpu');
	const busiest = Object.entries(TRUTH.cpu_totals).sort((a, b) => b[1] - a[1])[0][0];
	assert.equal(await page.$eval('#pick-service', (s) => s.value), busiest,
		     'the busiest service of type cpu');
	assert.match(decodeURIComponent(page.url()), new RegExp(`service_name="${busiest}"`),
		     'the default selection is kept in the URL');
	// The store is ten minutes old: the range starts just before its data,
	// not an hour ago, and the timeline's data fills most of the chart.
	const u = new URL(page.url());
	const from = +u.searchParams.get('from');
	assert.ok(from < TRUTH.start_ms && from > TRUTH.start_ms - 120e3,
		  `fitted from ${from}, the data from ${TRUTH.start_ms}`);
	assert.ok(!u.searchParams.has('until') || u.searchParams.get('until') === 'now');
	const d = await page.evaluate(() => window.__sonde.charts.timeline.data);
	const span = d.until - d.from;
	assert.ok((TRUTH.end_ms - TRUTH.start_ms) / span > 0.8,
		  `the data fills ${((TRUTH.end_ms - TRUTH.start_ms) / span * 100).toFixed(0)}% of the timeline`);
	assert.match(await page.$eval('#range-preset', (s) => s.selectedOptions[0].text), /Since the data began/);
	assert.equal(await page.$$eval('#errors .error', (e) => e.length), 0);
	await shot('01-open');
	// A range in the URL is the user's: no fitting.
	await go({ from: 'now-15m' });
	assert.equal(new URL(page.url()).searchParams.get('from'), 'now-15m');
});

test('the tooltip says where a function is in the source', async () => {
	await go({ query: Q(TRUTH.lines_service), ...RANGE, view: 'flame' });
	const f = await flame();
	for (const [name, where] of Object.entries(TRUTH.lines)) {
		const tip = await hover(f, one(f, name));
		assert.ok(tip.includes(where), `${name}'s tooltip names ${where}: ${tip}`);
	}
	const tip = await hover(f, one(f, 'total'));
	assert.ok(!tip.includes('/src/'), `the root names no file: ${tip}`);
	await shot('03-flame-source');
	// The top table says it too, under the name.
	await go({ query: Q(TRUTH.lines_service), ...RANGE, view: 'table' });
	for (const [name, where] of Object.entries(TRUTH.lines)) {
		const src = await page.$eval(`#top-table tr[data-name="${name}"] .src`, (e) => e.innerText);
		assert.equal(src, where.split('/').pop(), `${name}'s row names its file and line`);
	}
});

test('picking a workload shows its profile', async () => {
	await go({ ...RANGE });
	await page.fill('#pick-service', TRUTH.other_service);
	await page.press('#pick-service', 'Enter');
	await idle();
	let f = await flame();
	assert.equal(f.numTicks, TRUTH.other_total);
	assert.ok(find(f, 'matmul').length === 1, 'the trainer\'s matmul is drawn');
	await page.fill('#pick-service', TRUTH.service);
	await page.press('#pick-service', 'Enter');
	await idle();
	assert.match(decodeURIComponent(page.url()), /service_name="shares"/);
	f = await flame();
	assert.equal(f.numTicks, TRUTH.total);
	assert.equal(find(f, 'matmul').length, 0);
	const comms = await page.$$eval('#dl-comm option', (o) => o.map((x) => x.value));
	assert.deepEqual(comms, ['shares'], 'the process picker offers the service\'s processes');
	await shot('02-workload');
});

test('a job\'s pickers show where its samples say their job and rank', async () => {
	const shown = () => page.evaluate(() => ['job', 'rank', 'pod'].filter((l) =>
		!document.getElementById('pick-' + l).closest('label').hidden));
	// A service without a job: no job, rank or pod picker.
	await go({ query: Q(TRUTH.service), ...RANGE });
	assert.deepEqual(await shown(), [], 'no job pickers for a service without a job');
	// The trainer's samples are rank 0 of a job: its job and rank offered.
	await go({ query: Q(TRUTH.other_service), ...RANGE });
	assert.deepEqual(await shown(), ['job', 'rank'], 'job and rank pickers for the trainer');
	assert.deepEqual(await page.$$eval('#dl-job option', (o) => o.map((x) => x.value)),
			 [TRUTH.job]);
	assert.deepEqual(await page.$$eval('#dl-rank option', (o) => o.map((x) => x.value)), ['0']);
	// Picking the job selects its samples.
	await page.fill('#pick-job', TRUTH.job);
	await page.press('#pick-job', 'Enter');
	await idle();
	assert.match(decodeURIComponent(page.url()), new RegExp(`job="${TRUTH.job}"`));
	assert.equal((await flame()).numTicks, TRUTH.other_total, 'the job is the trainer\'s samples');
});

test('the hottest function is the widest node, drawn where its share says', async () => {
	await go({ query: Q(TRUTH.service), ...RANGE, view: 'flame' });
	const f = await flame();
	checkGeometry(f);
	const fns = TRUTH.functions;
	const hot = one(f, TRUTH.hottest);
	near(hot.w, fns[TRUTH.hottest] / TRUTH.total * f.width, 0.6, 'hottest width');
	for (const name of Object.keys(fns))
		assert.ok(one(f, name).w <= hot.w, `${name} is not wider than ${TRUTH.hottest}`);
	// Its callers are drawn right above it (icicle: root on top), full chain.
	const chain = TRUTH.chain;
	chain.forEach((name, d) => {
		const r = one(f, name);
		assert.equal(r.y, d * ROW, `${name} at depth ${d}`);
		assert.ok(r.x <= hot.x + 0.01 && r.x + r.w >= hot.x + hot.w - 0.01, `${name} covers the leaf`);
	});
	assert.equal(hot.y, chain.length * ROW);
	const px = await pixel(hot);
	assert.equal(px[3], 255, 'the node is painted');
	assert.ok(!(px[0] > 240 && px[1] > 240 && px[2] > 240), `the node is coloured (${px})`);
	const tip = await hover(f, hot);
	assert.match(tip, new RegExp(TRUTH.hottest));
	assert.ok(tip.includes(pct(fns[TRUTH.hottest], TRUTH.total)), `tooltip says the share: ${tip}`);
	assert.ok(tip.includes(fns[TRUTH.hottest].toLocaleString('en-US')), `tooltip says the count: ${tip}`);
	await shot('03-flame-hover');
});

test('the top table lists the hottest function first, sorts and filters', async () => {
	await go({ query: Q(TRUTH.service), ...RANGE });
	const rows = () => page.$$eval('#top-table tbody tr', (trs) => trs.map((tr) =>
		[...tr.querySelectorAll('td')].map((td) => td.innerText.trim())));
	let r = await rows();
	assert.equal(r[0][0], TRUTH.hottest);
	assert.equal(r[0][3], pct(TRUTH.functions[TRUTH.hottest], TRUTH.total));
	for (const [name, v] of Object.entries(TRUTH.functions)) {
		const row = r.find((x) => x[0] === name);
		assert.ok(row, `${name} is in the table`);
		assert.equal(row[3], pct(v, TRUTH.total), `${name} self %`);
	}
	await page.click('#top-table th[data-k="total"]');
	r = await rows();
	assert.equal(r[0][5], '100.00%', 'sorted by total, a root-chain function first');
	assert.ok(TRUTH.chain.includes(r[0][0]));
	await page.click('#top-table th[data-k="name"]');
	r = await rows();
	const names = r.map((x) => x[0]);
	assert.deepEqual(names, [...names].sort(), 'sorted by name');
	await page.click('#top-table th[data-k="selfp"]');
	r = await rows();
	assert.equal(r[0][0], TRUTH.hottest, 'self % descending');
	await page.click('#top-table th[data-k="selfp"]');
	r = await rows();
	assert.equal(r[r.length - 1][0], TRUTH.hottest, 'self % ascending');
	await page.fill('#table-filter', 'hot_');
	r = await rows();
	assert.deepEqual(r.map((x) => x[0]).sort(), Object.keys(TRUTH.functions).sort());
	await shot('04-table');
	await page.fill('#table-filter', '');
});

test('clicking a node zooms into it; the breadcrumb and reset zoom out', async () => {
	await go({ query: Q(TRUTH.service), ...RANGE, view: 'flame' });
	let f = await flame();
	const target = Object.keys(TRUTH.functions).find((n) => n !== TRUTH.hottest);
	const r = one(f, target);
	await page.mouse.click(f.box.x + r.x + r.w / 2, f.box.y + r.y + ROW / 2);
	await frames(page, 2);
	f = await flame();
	const z = one(f, target);
	near(z.x, 0, 0.01, 'zoomed node starts at the left');
	near(z.w, f.width, 0.01, 'zoomed node spans the width');
	assert.equal(find(f, TRUTH.hottest).length, 0, 'siblings are out of view');
	const crumbs = await page.$eval('.crumbs', (e) => e.innerText);
	assert.ok(crumbs.includes(TRUTH.chain.slice(1).join(' › ') + ' › ' + target), crumbs);
	await shot('05-zoomed');
	// Zoom out to "run" through the breadcrumb, then reset.
	await page.click(`.crumbs a:text-is("${TRUTH.chain[TRUTH.chain.length - 1]}")`);
	await frames(page, 2);
	f = await flame();
	near(one(f, target).w, TRUTH.functions[target] / TRUTH.total * f.width, 0.6, 'after breadcrumb');
	await page.mouse.click(f.box.x + one(f, target).x + 2, f.box.y + one(f, target).y + 5);
	await page.click('.crumbs button');
	await frames(page, 2);
	f = await flame();
	checkGeometry(f);
	near(one(f, target).w, TRUTH.functions[target] / TRUTH.total * f.width, 0.6, 'after reset');
});

test('search highlights the matches and shows their share', async () => {
	await go({ query: Q(TRUTH.service), ...RANGE, view: 'flame' });
	const fns = TRUTH.functions;
	const other = Object.keys(fns).find((n) => n !== TRUTH.hottest);
	await page.fill('#search', other);
	await page.waitForFunction((p) => document.querySelector('#search-pct')?.innerText === p,
		pct(fns[other], TRUTH.total), { timeout: 5000 });
	await frames(page, 2);
	const f = await flame();
	const dim = await pixel(one(f, TRUTH.hottest));
	const lit = await pixel(one(f, other));
	assert.deepEqual(dim.slice(0, 3), [228, 228, 228], 'a non-match is greyed');
	assert.notDeepEqual(lit.slice(0, 3), [228, 228, 228], 'the match keeps its colour');
	assert.match(page.url(), new RegExp('search=' + other));
	await shot('06-search');
	await page.fill('#search', 'hot_');
	await page.waitForFunction(() => document.querySelector('#search-pct')?.innerText === '100.00%',
		null, { timeout: 5000 });
	const two = Object.keys(fns).slice(0, 2);
	await page.fill('#search', `/^(${two.join('|')})$/`);
	await page.waitForFunction((p) => document.querySelector('#search-pct')?.innerText === p,
		pct(fns[two[0]] + fns[two[1]], TRUTH.total), { timeout: 5000 });
	await page.fill('#search', '');
});

test('the orientation toggles between icicle and flame and survives a reload', async () => {
	await go({ query: Q(TRUTH.service), ...RANGE, view: 'flame' });
	let f = await flame();
	assert.equal(one(f, 'total').y, 0, 'icicle: root on top');
	await page.click('#orient');
	await frames(page, 2);
	f = await flame();
	assert.equal(f.orientation, 'flame');
	const root = one(f, 'total');
	assert.equal(root.y, (f.levels - 1) * ROW, 'flame: root at the bottom');
	assert.equal(one(f, TRUTH.hottest).y, 0, 'flame: the leaf on top');
	const px = await pixel(root);
	assert.equal(px[3], 255, 'the root is painted at the bottom');
	checkGeometry(f);
	await shot('07-flame-orientation');
	assert.match(page.url(), /orient=flame/);
	await page.reload();
	await idle();
	f = await flame();
	assert.equal(one(f, 'total').y, (f.levels - 1) * ROW, 'still a flame after reload');
	assert.match(await page.$eval('#orient', (b) => b.textContent), /Flame/);
	await page.click('#orient');
});

test('a shared link shows the same view', async () => {
	const params = { query: Q(TRUTH.service), ...RANGE, view: 'both', search: 'hot_a', sort: 'total',
			 dir: 'asc' };
	await go(params);
	const other = await context.newPage();
	await go(params, other);
	const state = (p) => p.evaluate(() => ({
		search: document.querySelector('#search').value,
		share: document.querySelector('#search-pct').innerText,
		first: document.querySelector('#top-table tbody tr td').innerText,
		query: document.querySelector('#query').value,
		rects: window.__sonde.flame.rects().length,
	}));
	assert.deepEqual(await state(other), await state(page));
	await other.close();
});

test('right-click, alt-click or the table open the sandwich view of a function', async () => {
	await go({ query: Q(TRUTH.service), ...RANGE, view: 'flame' });
	const f = await flame();
	const mid = TRUTH.chain[TRUTH.chain.length - 1];
	const r = one(f, mid);
	await page.mouse.click(f.box.x + r.x + 10, f.box.y + r.y + ROW / 2, { button: 'right' });
	await page.click('.flame-menu:not([hidden]) [data-action="sandwich"]');
	await idle();
	assert.match(page.url(), /view=sandwich/);
	assert.match(page.url(), new RegExp('fn=' + mid));
	const callers = await flame('callers');
	const callees = await flame('callees');
	// Callers: the function at the bottom, its callers above it.
	assert.equal(one(callers, mid).y, (callers.levels - 1) * ROW);
	assert.equal(one(callers, TRUTH.chain[TRUTH.chain.length - 2]).y, (callers.levels - 2) * ROW);
	checkGeometry(callees);
	near(one(callees, TRUTH.hottest).w, TRUTH.functions[TRUTH.hottest] / TRUTH.total * callees.width,
	     0.6, 'callee share');
	await shot('08-sandwich');
	// And from the table.
	await go({ query: Q(TRUTH.service), ...RANGE, view: 'table' });
	await page.click(`#top-table tr[data-name="${TRUTH.hottest}"] button.sw`);
	await idle();
	const c2 = await flame('callers');
	assert.deepEqual(c2.rects.map((x) => x.name), [TRUTH.hottest, ...TRUTH.chain.slice(1).reverse()],
			 'the callers of the hottest function, from it to the outermost');
	// And by alt-click.
	await go({ query: Q(TRUTH.service), ...RANGE, view: 'flame' });
	const f3 = await flame();
	const leaf = Object.keys(TRUTH.functions).find((n) => n !== TRUTH.hottest);
	const r3 = one(f3, leaf);
	await page.keyboard.down('Alt');
	await page.mouse.click(f3.box.x + r3.x + r3.w / 2, f3.box.y + r3.y + ROW / 2);
	await page.keyboard.up('Alt');
	await idle();
	assert.equal(new URL(page.url()).searchParams.get('fn'), leaf, 'alt-click opens the sandwich');
});

test('dragging on the timeline selects a range', async () => {
	await go({ query: Q(TRUTH.service), from: String(TRUTH.start_ms - 300e3), until: String(TRUTH.end_ms),
		   view: 'flame' });
	const h = await page.evaluateHandle(() => window.__sonde.charts.timeline.canvas);
	const box = await h.boundingBox();
	const [x0, x1, msPerPx] = await page.evaluate(([a, b]) => {
		const c = window.__sonde.charts.timeline;
		return [c.xOf(a), c.xOf(b), (c.data.until - c.data.from) / (c.w - 82)];
	}, [TRUTH.half_ms, TRUTH.end_ms]);
	await page.mouse.move(box.x + x0, box.y + 40);
	await page.mouse.down();
	await page.mouse.move(box.x + (x0 + x1) / 2, box.y + 40, { steps: 4 });
	await page.mouse.move(box.x + x1, box.y + 40, { steps: 4 });
	await page.mouse.up();
	await idle();
	const u = new URL(page.url());
	near(+u.searchParams.get('from'), TRUTH.half_ms, 2 * msPerPx, 'from follows the drag');
	near(+u.searchParams.get('until'), TRUTH.end_ms, 2 * msPerPx, 'until follows the drag');
	const f = await flame();
	assert.ok(f.numTicks < TRUTH.total && f.numTicks > 0, `a part of the samples: ${f.numTicks}`);
	// In the newer half hot_b outweighs hot_a.
	const newer = Object.entries(TRUTH.new).sort((a, b) => b[1] - a[1])[0][0];
	for (const n of Object.keys(TRUTH.new))
		assert.ok(one(f, n).w <= one(f, newer).w, `${newer} is the widest in the newer half`);
	await shot('09-timeline-selection');
	await page.goBack();
	await idle();
	assert.equal(new URL(page.url()).searchParams.get('from'), String(TRUTH.start_ms - 300e3), 'back');
});

test('the diff view colours what got slower red and faster green', async () => {
	await go({ query: Q(TRUTH.service), ...RANGE });
	await page.click('#nav a[data-view="diff"]');
	await idle();
	assert.match(page.url(), /view=diff/);
	await go({ query: Q(TRUTH.service), ...RANGE, view: 'diff', left_from: String(TRUTH.start_ms),
		   left_until: String(TRUTH.half_ms), right_from: String(TRUTH.half_ms),
		   right_until: String(TRUTH.end_ms) });
	const f = await flame();
	const change = (n) => TRUTH.new[n] - TRUTH.old[n];
	for (const n of Object.keys(TRUTH.old)) {
		const px = await pixel(one(f, n));
		if (change(n) > 0)
			assert.ok(px[0] > px[1] + 40, `${n} got slower: red, not ${px}`);
		else if (change(n) < 0)
			assert.ok(px[1] > px[0] + 40, `${n} got faster: green, not ${px}`);
		else
			assert.ok(Math.abs(px[0] - px[1]) < 30, `${n} did not change: grey, not ${px}`);
	}
	const faster = Object.keys(TRUTH.old).find((n) => change(n) < 0);
	const tip = await hover(f, one(f, faster));
	assert.ok(tip.includes(`${change(faster).toFixed(2)} pp`), `tooltip gives the change: ${tip}`);
	assert.ok(tip.includes(pct(TRUTH.old[faster], 100)) && tip.includes(pct(TRUTH.new[faster], 100)), tip);
	await shot('10-diff');
});

test('export as pprof, speedscope and png, and open the speedscope view', async () => {
	await go({ query: Q(TRUTH.service), ...RANGE });
	const [dl] = await Promise.all([page.waitForEvent('download'), page.click('#export-pprof')]);
	const file = path.join(ART, 'export.pb.gz');
	await dl.saveAs(file);
	const prof = parsePprof(zlib.gunzipSync(fs.readFileSync(file)));
	const self = prof.selfByFunction();
	const total = Object.values(self).reduce((a, b) => a + b, 0);
	assert.equal(total, TRUTH.total, 'the pprof holds every sample');
	for (const [n, v] of Object.entries(TRUTH.functions))
		assert.equal(self[n], v, `${n} in the pprof`);
	const [dl2] = await Promise.all([page.waitForEvent('download'), page.click('#export-speedscope')]);
	const sfile = path.join(ART, 'export.speedscope.json');
	await dl2.saveAs(sfile);
	const ss = JSON.parse(fs.readFileSync(sfile, 'utf8'));
	assert.ok(ss.shared.frames.some((fr) => fr.name === TRUTH.hottest), 'speedscope frames');
	const [dl3] = await Promise.all([page.waitForEvent('download'), page.click('#export-png')]);
	const png = fs.readFileSync(await dl3.path());
	assert.equal(png.subarray(1, 4).toString(), 'PNG', 'the png export is a PNG');
	assert.ok(png.length > 1000, `the png holds a picture (${png.length} bytes)`);
	const [sp] = await Promise.all([context.waitForEvent('page'), page.click('#open-speedscope')]);
	await sp.waitForLoadState();
	await sp.waitForFunction(() => window.__sonde && window.__sonde.model(), null, { timeout: 15000 });
	await frames(sp, 2);
	const f = await flame(null, sp);
	assert.equal(f.numTicks, TRUTH.total);
	near(one(f, TRUTH.hottest).w, TRUTH.functions[TRUTH.hottest] / TRUTH.total * f.width, 0.6,
	     'speedscope view width');
	await shot('12-speedscope', sp);
	await sp.close();
});

test('empty states and API errors are shown', async () => {
	await go({ query: '{service_name="no-such-service", type="cpu"}', ...RANGE });
	assert.match(await page.$eval('.empty', (e) => e.innerText), /No samples for this selection/);
	await go({ from: String(TRUTH.start_ms - 7200e3), until: String(TRUTH.start_ms - 3600e3) });
	const empty = await page.$eval('.empty', (e) => e.innerText);
	assert.match(empty, /No profiles yet/);
	assert.match(empty, /sonde agent --server/);
	await shot('13-empty');
	await go({ view: 'gpu', from: String(TRUTH.start_ms - 7200e3), until: String(TRUTH.start_ms - 3600e3) });
	assert.match(await page.$eval('.empty', (e) => e.innerText), /No GPU data in this range/);
	// A bad selector: one banner with the server's reason, nothing drawn
	// from it, no export links, the type picker still on its type.
	for (const q of ['{service_name=', '{type="cpu", service_name=~"(("}']) {
		await go({ query: q, ...RANGE });
		const errs = await page.$$eval('#errors .error', (e) => e.map((x) => x.innerText));
		assert.equal(errs.length, 1, `one banner for ${q}: ${errs}`);
		assert.match(errs[0], /is not valid: .*(offset|regex)/, errs[0]);
		assert.match(await page.$eval('.empty', (e) => e.innerText), /Fix the selector/);
		assert.equal(await page.$$eval('#export-pprof, #top-table, canvas', (e) => e.length), 0);
	}
	assert.equal(await page.$eval('#pick-type', (s) => s.value), 'cpu');
	await shot('14-error');
});

test('a 100 000-node flame graph draws smoothly (measured, reported)', async () => {
	const fb = generateFlamebearer(100000, 7);
	const body = JSON.stringify(fb);
	await page.route('**/api/v1/flamegraph?*', (r) => r.fulfill({ status: 200, body,
		contentType: 'application/json' }));
	await go({ query: Q(TRUTH.service), ...RANGE, view: 'flame' });
	let f = await flame();
	const nodes = await page.evaluate(() => window.__sonde.flame.model.n);
	assert.equal(nodes, fb.nodes);
	assert.ok(f.rects.length < nodes, 'tiny nodes are merged, not drawn one by one');
	// Each visible level's rectangles (drawn and merged) stay inside the width.
	checkGeometry(f);
	const stats = await page.evaluate(async () => {
		const fl = window.__sonde.flame;
		fl.drawTimes.length = 0;
		const draws0 = fl.draws;
		const m = fl.model;
		const t0 = performance.now();
		let frames = 0;
		// 240 frames: hover moves every frame, a zoom into a deep node every 20.
		await new Promise((res) => {
			const tick = (k) => {
				frames++;
				const i = 1 + ((k * 7919) % (m.n - 1));
				if (k % 20 === 0)
					fl.zoomTo(k % 40 === 0 ? m.parent[i] : 0);
				fl.hover = i;
				fl.schedule();
				if (k < 240)
					requestAnimationFrame(() => tick(k + 1));
				else
					res();
			};
			tick(0);
		});
		const elapsed = performance.now() - t0;
		const d = [...fl.drawTimes].sort((a, b) => a - b);
		const q = (p) => d[Math.min(d.length - 1, Math.floor(p * d.length))];
		return { frames, draws: fl.draws - draws0, elapsed_ms: elapsed,
			 draw_mean_ms: d.reduce((a, b) => a + b, 0) / d.length, draw_p50_ms: q(0.5),
			 draw_p95_ms: q(0.95), draw_max_ms: d[d.length - 1],
			 fps: frames / (elapsed / 1000), rects_drawn: fl.rec.n, canvas_width: fl.width };
	});
	stats.nodes = nodes;
	assert.ok(stats.draws <= stats.frames + 1, 'at most one draw per animation frame');
	fs.writeFileSync(path.join(ART, 'smoothness.json'), JSON.stringify(stats, null, 1));
	console.log('  SMOOTHNESS ' + JSON.stringify(stats));
	await fl_reset();
	await shot('15-100k-nodes');
	await page.unroute('**/api/v1/flamegraph?*');
	async function fl_reset() {
		await page.evaluate(() => window.__sonde.flame.reset());
		await frames(page, 2);
		f = await flame();
		checkGeometry(f);
	}
});

await import('./gpu.mjs');
await import('./flame.mjs');
await import('./views.mjs');
await import('./a11y.mjs');
await runAll();
