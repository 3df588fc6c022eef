// gpu.mjs: the browser tests of the GPU page (ui/js/gpu.js) and its charts
// (ui/js/charts.js), registered with harness.mjs's runner; imported by
// run.mjs. testdata.py's GPU_PROCS is the truth: 16 process names on three
// devices, a job restarted twice, one process exiting early, one starting
// late; its SHARES, what bounded some of them (verdicts_by_name, _by_pid).

import assert from 'node:assert/strict';
import path from 'node:path';
import { TRUTH, RANGE, ART, test, page, near, go, idle, frames, shot } from './harness.mjs';
import { fmtBytes, fmtCount } from '../../ui/js/format.js';

const PIDS = TRUTH.gpu_pids;
const JOB = TRUTH.gpu_restarted;
const drillQuery = (name) => `{comm="${name}"}`;
const sorted = (a) => [...a].sort((x, y) => x.localeCompare(y, 'en', { numeric: true }));
const sum = (s) => s.points.reduce((a, p) => a + p[1], 0);

// The names (or, in a drill-down, the pids) with points of a metric, and
// those of them alive at time t.
const hasMemory = (p) => PIDS[p].memory_peak > 0;
const hasLaunches = (p) => PIDS[p].launches > 0;
function namesWith(has, t = null) {
	return sorted(new Set(Object.keys(PIDS).filter((p) => has(p) &&
		(t === null || (PIDS[p].first_ms <= t && t <= PIDS[p].last_ms))).map((p) => PIDS[p].comm)));
}

async function series(name) {
	return page.evaluate((n) => window.__sonde.charts[n].data.series.map((s) => ({
		label: s.label, color: s.color, points: s.points })), name);
}

// Moves the pointer over chart `name` at time t; returns what its read-out
// shows and the time under the pointer.
async function hoverAt(name, t) {
	const h = await page.evaluateHandle((n) => window.__sonde.charts[n].canvas, name);
	await h.scrollIntoViewIfNeeded();
	await frames(page, 1);
	const box = await h.boundingBox();
	const x = await page.evaluate(([n, tt]) => window.__sonde.charts[n].xOf(tt), [name, t]);
	await page.mouse.move(box.x + x, box.y + box.height / 2);
	await frames(page, 2);
	return page.evaluate((n) => {
		const c = window.__sonde.charts[n];
		return { hidden: c.tip.hidden, text: c.tip.innerText, t: c.tOf(c.hoverX),
			 rows: [...c.tip.querySelectorAll('tr')].map((tr) => [tr.querySelector('th').innerText.trim(),
									  tr.querySelector('td').innerText]) };
	}, name);
}

// Times of the range (seconds into it) clear of every process's start and
// end by more than the read-out's reach, so that what it lists is certain.
function clear(offsets, msPerPx) {
	const edges = Object.values(PIDS).flatMap((p) => [p.first_ms, p.last_ms]);
	const reach = Math.max(1.5 * 1000, 6 * msPerPx) + 2 * msPerPx;
	for (const o of offsets) {
		const t = TRUTH.start_ms + o * 1000;
		for (const e of edges)
			assert.ok(Math.abs(t - e) > reach, `${o} s is ${Math.abs(t - e)} ms from a start or end`);
	}
	return offsets.map((o) => TRUTH.start_ms + o * 1000);
}

test('the GPU page charts memory, launches, waits and NCCL per process name, and lists alerts', async () => {
	await go({ view: 'gpu', ...RANGE });
	let charts = await page.evaluate(() => Object.fromEntries(Object.entries(window.__sonde.charts)
		.map(([k, c]) => [k, c.data.series.map((s) => ({ label: s.label, points: s.points }))])));
	for (const k of ['memory', 'launches', 'wait', 'nccl-duration', 'nccl-calls'])
		assert.ok(charts[k] && charts[k].length, `chart ${k} has series`);
	assert.deepEqual(charts.memory.map((s) => s.label), namesWith(hasMemory),
			 'one memory line per process name');
	for (const [k, has] of [['launches', hasLaunches], ['wait', hasLaunches]])
		assert.deepEqual(charts[k].map((s) => s.label), namesWith(has), `${k}: one line per process name`);
	for (const [name, n] of Object.entries(TRUTH.gpu_names))
		if (n.launches)
			near(sum(charts.launches.find((s) => s.label === name)), n.launches, n.launches * 1e-9,
			     `launches of ${name}, all its pids`);
	for (const p of charts['nccl-duration'][0].points)
		if (p[1] !== null)
			near(p[1], TRUTH.nccl_mean_s, 1e-9, 'NCCL mean duration');
	// The charts are drawn: their plot areas hold coloured pixels.
	const painted = await page.evaluate(() => Object.values(window.__sonde.charts).map((c) => {
		const d = c.ctx.getImageData(0, 0, c.canvas.width, c.canvas.height).data;
		let n = 0;
		for (let i = 0; i < d.length; i += 4)
			if (d[i + 3] && Math.max(d[i], d[i + 1], d[i + 2]) - Math.min(d[i], d[i + 1], d[i + 2]) > 60)
				n++;
		return n;
	}));
	assert.ok(painted.every((n) => n > 20), `every chart has coloured lines: ${painted}`);
	const alerts = await page.$$eval('#alerts-table tbody tr', (trs) => trs.map((tr) => [
		tr.querySelector('.status').innerText, tr.querySelectorAll('td')[1].innerText]));
	assert.deepEqual(alerts.map((a) => a[1]).sort(), [...TRUTH.alerts].sort());
	assert.equal(alerts[0][0], 'firing', 'firing alerts first');
	await shot('11-gpu');
	// python3's pids: memory, launches and waits a line per pid, each its own truth.
	await go({ view: 'gpu', ...RANGE, gpu_query: drillQuery('python3') });
	charts = await page.evaluate(() => Object.fromEntries(Object.entries(window.__sonde.charts)
		.map(([k, c]) => [k, c.data.series.map((s) => ({ label: s.label, points: s.points }))])));
	assert.equal(charts.memory.length, 2, `a memory line per pid of python3: ${charts.memory.map((s) => s.label)}`);
	const peak = Math.max(...charts.memory.find((s) => s.label.includes('pid 4242')).points.map((p) => p[1]));
	near(peak, TRUTH.memory_peak_bytes, 1, 'memory peak of pid 4242');
	for (const [k, truth, scale] of [['launches', TRUTH.launches_by_pid, 1],
					 ['wait', TRUTH.wait_s_by_pid, 1e9]]) {
		assert.equal(charts[k].length, Object.keys(truth).length, `${k}: one line per pid`);
		for (const [pid, want] of Object.entries(truth)) {
			const s = charts[k].find((x) => x.label.includes('pid ' + pid));
			assert.ok(s, `${k}: a line for pid ${pid}: ${charts[k].map((x) => x.label)}`);
			near(sum(s), want * scale, want * scale * 0.001, `${k} of pid ${pid} in range`);
		}
	}
	near(sum(charts.launches.find((x) => x.label.includes('pid 777'))), TRUTH.launches,
	     TRUTH.launches * 0.001, 'pid 777 launches agree with its gpu_launch profiles');
	for (const p of charts['nccl-duration'][0].points)
		if (p[1] !== null)
			near(p[1], TRUTH.nccl_mean_s, 1e-9, 'NCCL in the drill-down, its mean duration');
});

test('the GPU tooltip lists only the series with data near the pointer', async () => {
	await go({ view: 'gpu', ...RANGE });
	const msPerPx = await page.evaluate(() => {
		const c = window.__sonde.charts.memory, d = c.data;
		return (d.until - d.from) / (c.xOf(d.until) - c.xOf(d.from));
	});
	// 185 s: train_job between two runs, preproc gone, eval not started;
	// 300 s: train_job's second run; 520 s: its third, and eval.
	const times = clear([185, 300, 520], msPerPx);
	for (const [chart, has, fmt] of [['memory', hasMemory, fmtBytes],
					 ['launches', hasLaunches, (v) => fmtCount(v) + '/s']]) {
		for (const t of times) {
			const tip = await hoverAt(chart, t);
			assert.ok(!tip.hidden, `${chart}: a read-out at ${t}`);
			near(tip.t, t, 2 * msPerPx, 'the pointer is at the time asked');
			const want = namesWith(has, tip.t);
			assert.deepEqual(sorted(tip.rows.map((r) => r[0])), want,
					 `${chart} at +${(t - TRUTH.start_ms) / 1000} s lists the processes with data then`);
			assert.ok(want.length < namesWith(has).length, 'some processes have no data then');
			// The read-out's values are those of the second under the pointer.
			const sec = Math.round(tip.t / 1000) * 1000;
			const job = tip.rows.find((r) => r[0] === JOB);
			const run = Object.entries(PIDS).find(([, p]) => p.comm === JOB && p.first_ms <= sec &&
							       sec <= p.last_ms);
			if (run) {
				const v = chart === 'memory' ? run[1].memory_peak
					: run[1].launches / ((run[1].last_ms - run[1].first_ms) / 1000 + 1);
				assert.equal(job[1], fmt(v), `${JOB}'s value at ${sec}`);
			}
			const rows = tip.rows.map((r) => r[1]);
			assert.ok(tip.rows.length, `${chart}: rows at ${t}`);
			assert.ok(rows.length === want.length, 'no row twice');
		}
		if (chart === 'memory')
			await shot('11-gpu-tooltip');
	}
	// The drill-down into the restarted job: between its runs, no data.
	await go({ view: 'gpu', ...RANGE, gpu_query: drillQuery(JOB) });
	const tipGap = await hoverAt('memory', times[0]);
	assert.deepEqual(tipGap.rows, [], `nothing listed between ${JOB}'s runs`);
	assert.match(tipGap.text, /No data here/);
	const tipRun = await hoverAt('memory', times[1]);
	const live = Object.entries(PIDS).filter(([, p]) => p.comm === JOB && p.first_ms <= tipRun.t &&
						  tipRun.t <= p.last_ms).map(([pid]) => `${JOB} · pid ${pid}`);
	assert.equal(live.length, 1);
	assert.deepEqual(tipRun.rows.map((r) => r[0]), live, `only the run of ${JOB} alive then`);
	await page.mouse.move(0, 0);
});

test('GPU: a job restarted under one name is one legend entry and one line; its entry drills down to its pids', async () => {
	await go({ view: 'gpu', ...RANGE });
	const legend = await page.$$eval('#chart-memory .legend [data-i]', (s) => s.map((x) => x.innerText.trim()));
	assert.deepEqual(legend, namesWith(hasMemory), 'the legend: one entry per process name');
	const mem = await series('memory');
	const job = mem.filter((s) => s.label.includes(JOB));
	assert.equal(job.length, 1, `${JOB}: one line (${mem.map((s) => s.label)})`);
	const runs = Object.entries(PIDS).filter(([, p]) => p.comm === JOB);
	assert.equal(runs.length, 3, 'the job ran three times');
	assert.equal(job[0].points.length, runs.reduce((a, [, p]) => a + (p.last_ms - p.first_ms) / 1000 + 1, 0),
		     'its line holds every second of its three runs');
	// Its legend entry drills down: one line per pid, in the URL.
	await page.click(`#chart-memory .legend button[data-i="${mem.indexOf(job[0])}"]`);
	await idle();
	assert.equal(new URL(page.url()).searchParams.get('gpu_query'), drillQuery(JOB), 'the drill-down is in the URL');
	assert.equal(await page.$eval('#gpu-process', (e) => e.value), JOB, 'the Process picker shows it');
	const pids = await series('memory');
	assert.deepEqual(pids.map((s) => s.label), runs.map(([pid]) => `${JOB} · pid ${pid}`), 'a line per pid');
	for (const [pid, p] of runs) {
		const s = pids.find((x) => x.label.endsWith('pid ' + pid));
		assert.equal(s.points[0][0], p.first_ms, `pid ${pid} starts when it started`);
		assert.equal(s.points[s.points.length - 1][0], p.last_ms, `pid ${pid} ends when it exited`);
	}
	const launches = await series('launches');
	for (const [pid, p] of runs)
		assert.equal(sum(launches.find((x) => x.label.endsWith('pid ' + pid))), p.launches, `launches of pid ${pid}`);
	await shot('11-gpu-drilldown');
	await page.goBack();
	await idle();
	assert.equal(new URL(page.url()).searchParams.get('gpu_query'), null, 'Back leaves the drill-down');
	assert.equal((await series('memory')).length, namesWith(hasMemory).length, 'every name again');
	// The Process picker drills down too, and back to all.
	await page.selectOption('#gpu-process', 'preproc');
	await idle();
	assert.equal(new URL(page.url()).searchParams.get('gpu_query'), drillQuery('preproc'));
	assert.deepEqual((await series('memory')).map((s) => s.label), ['preproc · pid 5101']);
	await page.selectOption('#gpu-process', '');
	await idle();
	assert.equal(new URL(page.url()).searchParams.get('gpu_query'), null, 'All processes');
});

test('GPU: a panel per device with the memory each process holds there and the device total', async () => {
	await go({ view: 'gpu', ...RANGE });
	const devs = TRUTH.gpu_devices;
	const keys = await page.evaluate(() => Object.keys(window.__sonde.charts).filter((k) => k.startsWith('device:')));
	assert.deepEqual(keys.map((k) => k.slice(7)), sorted(Object.keys(devs)), 'a panel per node and GPU');
	for (const [key, d] of Object.entries(devs)) {
		const s = await series('device:' + key);
		const total = s.find((x) => x.label === 'total');
		assert.deepEqual(s.filter((x) => x !== total).map((x) => x.label), d.names, `${key}: its processes`);
		assert.equal(total.points.length, d.total.length, `${key}: the total every second`);
		total.points.forEach(([t, v], i) => {
			assert.equal(t, d.total[i][0], `${key}: total's time ${i}`);
			near(v, d.total[i][1], 1, `${key}: total at ${t}`);
		});
		const title = await page.$eval(`[data-device="${key}"] .chart-title`, (e) => e.innerText);
		assert.ok(title.includes(`peak ${fmtBytes(d.peak)} used of ${fmtBytes(d.capacity)}`),
			  `${key}: the title gives its peak and capacity: ${title}`);
		assert.ok(title.includes(`GPU ${d.gpu_id} on ${d.node}`), title);
	}
	await page.$eval('.gpu-devices', (e) => e.scrollIntoView());
	await shot('11-gpu-devices');
	// In a drill-down, the devices the job used, its pids on each, and each
	// device's whole total still.
	await go({ view: 'gpu', ...RANGE, gpu_query: drillQuery(JOB) });
	const used = {};
	for (const [pid, p] of Object.entries(PIDS))
		if (p.comm === JOB && hasMemory(pid))
			(used[`${p.node}/${p.gpu_id}`] ||= []).push(`${JOB} · pid ${pid}`);
	const dkeys = await page.evaluate(() => Object.keys(window.__sonde.charts).filter((k) => k.startsWith('device:')));
	assert.deepEqual(dkeys.map((k) => k.slice(7)), sorted(Object.keys(used)), `the devices ${JOB} used`);
	for (const [key, want] of Object.entries(used)) {
		const s = await series('device:' + key);
		assert.deepEqual(s.filter((x) => x.label !== 'total').map((x) => x.label), want, `${key}: its pids`);
		near(Math.max(...s.find((x) => x.label === 'total').points.map((p) => p[1])), devs[key].peak, 1,
		     `${key}: the device's total`);
	}
});

// WCAG's contrast ratio of two #rrggbb colours.
function contrast(a, b) {
	const lum = (h) => {
		const c = [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16) / 255)
			.map((x) => (x <= 0.04045 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4));
		return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
	};
	const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p);
	return (x + 0.05) / (y + 0.05);
}

test('GPU: series colours differ within a chart, are one per process across charts and loads, and read on light and dark', async () => {
	const read = () => page.evaluate(() => Object.fromEntries(Object.entries(window.__sonde.charts)
		.map(([k, c]) => [k, Object.fromEntries(c.data.series.map((s) => [s.label, s.color]))])));
	await go({ view: 'gpu', ...RANGE });
	const first = await read();
	assert.ok(Object.keys(first.memory).length >= 14, 'enough processes that a 10-colour palette repeats');
	for (const [k, cols] of Object.entries(first)) {
		const v = Object.values(cols);
		assert.equal(new Set(v).size, v.length, `${k}: no two series share a colour: ${JSON.stringify(cols)}`);
	}
	for (const [k, cols] of Object.entries(first))
		for (const [label, c] of Object.entries(cols))
			if (first.memory[label])
				assert.equal(c, first.memory[label], `${label} has one colour (memory, ${k})`);
	for (const [label, c] of Object.entries(first.memory)) {
		assert.match(c, /^#[0-9a-f]{6}$/);
		assert.ok(contrast(c, '#ffffff') >= 3 && contrast(c, '#17181f') >= 3,
			  `${label}'s ${c} reads on white and on a dark page`);
	}
	await go({ view: 'gpu', ...RANGE });
	assert.deepEqual(await read(), first, 'the same colours after a reload');
	await page.mouse.move(0, 0);
	await page.emulateMedia({ colorScheme: 'dark' });
	await frames(page, 2);
	await shot('11-gpu-dark');
	await page.emulateMedia({ colorScheme: 'light' });
});

// What the "What bounds each process" section shows: per row its key, its
// verdict, the shares in words, the bar's label, and each segment's state,
// title and width against the bar's.
async function verdictRows() {
	await page.$eval('#gpu-verdicts', (e) => e.scrollIntoView());
	await frames(page, 1);
	return page.$$eval('#gpu-verdicts tbody tr', (trs) => trs.map((tr) => {
		const bar = tr.querySelector('.share-bar'), bw = bar.getBoundingClientRect().width;
		return { key: tr.dataset.key, verdict: tr.querySelector('.verdict').innerText.trim(),
			 words: tr.querySelector('.shares').innerText.trim(), barWidth: bw,
			 role: bar.getAttribute('role'), label: bar.getAttribute('aria-label'),
			 segs: [...bar.querySelectorAll('.seg')].map((s) => ({ state: s.dataset.state,
				 title: s.title, width: s.getBoundingClientRect().width,
				 color: getComputedStyle(s).backgroundColor })) };
	}));
}

const VERDICT_TEXT = (v) => (v === 'idle' ? 'idle' : v + '-bound');
const STATES = ['gpu_wait', 'collective', 'dataloader_wait', 'on_cpu', 'lock', 'io', 'sleep'];

// A row against its truth ({means, verdict}): the verdict, a segment per
// state of at least half a percent as wide as its mean share of the bar
// (within a pixel) and titled with it, the same in words, largest first.
function checkRow(row, truth) {
	const what = row.key;
	assert.equal(row.verdict, VERDICT_TEXT(truth.verdict), `${what}: its verdict`);
	const want = STATES.filter((s) => truth.means[s] >= 0.005);
	assert.deepEqual(row.segs.map((s) => s.state), want, `${what}: a segment per state with time`);
	for (const s of row.segs) {
		const m = truth.means[s.state];
		near(s.width, m * row.barWidth, 1, `${what}: the width of ${s.state} (${m})`);
		assert.equal(s.title, `${s.state} ${Math.round(m * 100)} %`, `${what}: ${s.state}'s title`);
	}
	const words = [...want].sort((a, b) => truth.means[b] - truth.means[a] ||
				     STATES.indexOf(a) - STATES.indexOf(b))
		.map((s) => `${s} ${Math.round(truth.means[s] * 100)} %`).join(', ');
	assert.equal(row.words, words, `${what}: the shares in words`);
	assert.equal(row.role, 'img', `${what}: the bar is an image to screen readers...`);
	assert.ok(row.label.includes(VERDICT_TEXT(truth.verdict)) && row.label.includes(words),
		  `${what}: ...described by its label: ${row.label}`);
}

test('GPU: what bounds each process -- a verdict per process name over the range, a bar of its shares, per pid in the drill-down', async () => {
	await go({ view: 'gpu', ...RANGE });
	const names = TRUTH.verdicts_by_name;
	let rows = await verdictRows();
	assert.deepEqual(rows.map((r) => r.key), sorted(Object.keys(names)),
			 'a row per process name with verdicts, and none for the others');
	for (const r of rows)
		checkRow(r, names[r.key]);
	// The cases the data holds, said plainly (testdata.py's SHARES).
	const by = Object.fromEntries(rows.map((r) => [r.key, r.verdict]));
	assert.deepEqual(by, { eval: 'cpu-bound', preproc: 'idle', python3: 'gpu-bound',
			       train_job: 'idle', 'worker-01': 'communication-bound' },
			 'mean of halves, nothing reaching 20 %, two pids merged, asleep, a tie');
	// A colour per state, each reading on the panel (3:1).
	const legend = await page.$$eval('#gpu-verdicts .verdicts-legend li', (li) => li.map((x) => [
		x.innerText.trim(), getComputedStyle(x.querySelector('i')).backgroundColor]));
	assert.deepEqual(legend.map((l) => l[0]), STATES, 'the legend names every state');
	const hexOf = (rgb) => '#' + rgb.match(/\d+/g).slice(0, 3)
		.map((v) => (+v).toString(16).padStart(2, '0')).join('');
	const colors = legend.map((l) => hexOf(l[1]));
	assert.equal(new Set(colors).size, STATES.length, `one colour per state: ${colors}`);
	for (const c of colors)
		assert.ok(contrast(c, '#ffffff') >= 3 && contrast(c, '#1e2129') >= 3, `${c} reads on both panels`);
	for (const r of rows)
		for (const s of r.segs)
			assert.equal(hexOf(s.color), colors[STATES.indexOf(s.state)], `${r.key}: ${s.state} in its colour`);
	await shot('11-gpu-verdicts');

	// A name drills down to its pids, each its own verdict.
	await page.click('#gpu-verdicts tr[data-key="python3"] button.drill');
	await idle();
	assert.equal(new URL(page.url()).searchParams.get('gpu_query'), drillQuery('python3'),
		     'the drill-down is in the URL');
	rows = await verdictRows();
	const pids = TRUTH.verdicts_by_pid;
	assert.deepEqual(rows.map((r) => r.key), ['python3 · pid 4242', 'python3 · pid 4243'],
			 'a row per pid of python3 with verdicts');
	for (const r of rows)
		checkRow(r, pids[r.key.split('pid ')[1]]);
	assert.deepEqual(rows.map((r) => r.verdict), ['gpu-bound', 'input-bound']);
	await shot('11-gpu-verdicts-drilldown');
	// A process without verdicts: the section says where they come from.
	await go({ view: 'gpu', ...RANGE, gpu_query: drillQuery('worker-02') });
	assert.ok((await series('memory')).length, 'worker-02 has GPU data');
	assert.equal(await page.$$eval('#gpu-verdicts tbody tr', (t) => t.length), 0, 'no verdict rows');
	assert.match(await page.$eval('#gpu-verdicts', (e) => e.innerText),
		     /No verdicts yet: they come from sonde agent at the end of each window/);
	// Where the page has no GPU data at all, only the page's own empty state.
	await go({ view: 'gpu', from: String(TRUTH.start_ms - 7200e3), until: String(TRUTH.start_ms - 3600e3) });
	assert.equal(await page.$$eval('#gpu-verdicts', (e) => e.length), 0, 'no section on an empty page');
});

// ---- the kernel timeline ---------------------------------------------------------------
// testdata.py's spans: python3's pid 4242 (process="python3"), three 2 ms
// kernels 5 ms apart on device 0 stream 13 and a copy on stream 7, 60 s
// before the range's end; the other processes with launches have none.

// Console errors of the page, for the timeline's tests to find none.
const consoleErrors = [];
page.on('console', (m) => {
	if (m.type() === 'error')
		consoleErrors.push(m.text());
});

// The timeline's view: its start and end (ns since the epoch, exact, from
// the panel's data attributes) and its span, as BigInts.
async function view() {
	const v = await page.$eval('#gpu-timeline canvas.gpu-tl-axis', (c) => [c.dataset.viewStartNs,
		c.dataset.viewEndNs]);
	const [start, end] = v.map((x) => BigInt(x));
	return { start, end, span: end - start };
}

// Waits until the timeline has drawn and its view passes pred (a function
// of the view as strings, run in the page), then returns the view.
async function viewWhen(pred) {
	await page.waitForFunction(`(() => { const c = document.querySelector('#gpu-timeline ` +
		`canvas.gpu-tl-axis'); const t = window.__sonde.gpuTimeline; if (!c || !t || ` +
		`!t.drawn()) return false; const s = BigInt(c.dataset.viewStartNs), e = ` +
		`BigInt(c.dataset.viewEndNs); return (${pred})(s, e); })()`, null, { timeout: 10000 });
	return view();
}

const ticks = () => page.evaluate(() => window.__sonde.gpuTimeline.ticks());
const bars = () => page.evaluate(() => window.__sonde.gpuTimeline.bars());
const hex = (h) => [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16));

// The colour of a lane's canvas at page x, its middle row.
const lanePixel = (stream, x) => page.evaluate(([st, xx]) => {
	const c = document.querySelector(`#gpu-timeline .gpu-tl-lane[data-stream="${st}"] canvas`);
	const r = c.getBoundingClientRect(), dpr = window.devicePixelRatio || 1;
	return [...c.getContext('2d').getImageData(Math.floor((xx - r.left) * dpr),
		Math.floor(c.height / 2), 1, 1).data].slice(0, 3);
}, [stream, x]);
// A screenshot of the timeline's panel alone.
const panelShot = (name) => page.locator('#gpu-timeline').screenshot({ path: path.join(ART, name + '.png') });
const cssVar = (name) => page.evaluate((n) => getComputedStyle(document.querySelector('#gpu-timeline'))
	.getPropertyValue(n).trim(), name);

async function openTimeline() {
	await go({ view: 'gpu', ...RANGE });
	await page.waitForSelector('#gpu-timeline canvas.gpu-tl-track');
	await page.$eval('#gpu-timeline .gpu-tl-body', (e) => e.scrollIntoView({ block: 'center' }));
	await viewWhen('() => true');
}

test('the kernel timeline draws each kernel as a bar at least a pixel wide, in the theme; hover shows its name and stack', async () => {
	const errs = consoleErrors.length;
	await openTimeline();
	const lanes = await page.$$eval('#gpu-timeline .gpu-tl-lane',
		(ls) => ls.map((l) => `${l.dataset.device}/${l.dataset.stream}:${l.dataset.spans}`));
	assert.deepEqual(lanes, ['0/7:1', '0/13:3', '-1/13:1'],
			 'a lane per device and stream, with its spans, then the host\'s waits');
	const names = await page.$$eval('#gpu-timeline .gpu-tl-lane .gpu-tl-name', (ns) => ns.map((n) => n.textContent));
	assert.deepEqual(names, ['GPU 0 · stream 7', 'GPU 0 · stream 13', 'host waits · stream 13']);
	const head = await page.textContent('#gpu-timeline .gpu-tl-proc');
	assert.match(head, new RegExp(`${TRUTH.timeline_process} · pid 4242 · gpu-7`));
	// The whole range (10 min on ~1200 px): a 2 ms kernel is far under a
	// pixel, and is drawn a pixel wide in --bar, the copy in --accent.
	const v = await view();
	assert.equal(v.span, BigInt(TRUTH.end_ms - TRUTH.start_ms) * 1000000n, 'the whole range shown');
	const b = await bars();
	assert.deepEqual(b.map((x) => `${x.lane}:${x.kind}`).sort(),
			 ['-1/13:sync', '0/13:kernel', '0/13:kernel', '0/13:kernel', '0/7:memcpy HtoD'],
			 'a bar per span');
	for (const x of b)
		assert.ok(x.w >= 1 && x.w < 2, `${x.name} is drawn one pixel wide (${x.w})`);
	const k = b.find((x) => x.kind === 'kernel'), c = b.find((x) => x.kind !== 'kernel');
	assert.deepEqual(await lanePixel(13, k.x), hex(await cssVar('--bar')), 'the kernel is painted');
	assert.deepEqual(await lanePixel(7, c.x), hex(await cssVar('--accent')), 'the copy is painted');
	assert.deepEqual(await lanePixel(13, k.x - 20), hex(await cssVar('--bar-bg')), 'the track around it');
	// Hovering the pixel names the kernel, its stream, its duration and the
	// stack that launched it, and where its time comes from.
	await page.mouse.move(k.x + 0.5, k.y + k.h / 2);
	const tip = page.locator('#gpu-timeline .gpu-tl-tip');
	await tip.waitFor({ state: 'visible' });
	const text = await tip.textContent();
	assert.ok(text.includes(TRUTH.timeline_kernel), `hover names the kernel: ${text}`);
	assert.ok(text.includes('stream 13'), `hover names the stream: ${text}`);
	assert.match(text, /2(\.0+)? ms timed on the GPU by CUPTI/, `hover gives its duration and source: ${text}`);
	for (const f of TRUTH.timeline_from.split(' < '))
		assert.ok(text.includes(f), `hover shows the launching stack (${f}): ${text}`);
	await shot('11-gpu-timeline');
	await panelShot('11-gpu-timeline-panel');
	// Dark: drawn again in the dark theme's colours.
	await page.mouse.move(0, 0);
	await page.emulateMedia({ colorScheme: 'dark' });
	try {
		await page.waitForFunction(() => document.documentElement.dataset.theme === 'dark');
		const dark = hex(await cssVar('--bar-bg'));
		assert.notDeepEqual(dark, hex('#e6e6ea'));
		await page.waitForFunction(([x, want]) => {
			const cv = document.querySelector('#gpu-timeline .gpu-tl-lane[data-stream="13"] canvas');
			const r = cv.getBoundingClientRect(), dpr = window.devicePixelRatio || 1;
			const p = cv.getContext('2d').getImageData(Math.floor((x - r.left) * dpr),
				Math.floor(cv.height / 2), 1, 1).data;
			return p[0] === want[0] && p[1] === want[1] && p[2] === want[2];
		}, [k.x - 20, dark], { timeout: 5000 });
		await panelShot('11-gpu-timeline-dark');
	} finally {
		await page.emulateMedia({ colorScheme: 'light' });
	}
	assert.deepEqual(consoleErrors.slice(errs), [], 'no console errors');
});

test('the kernel timeline zooms (ctrl+wheel at the pointer, W/S), pans (shift+drag, shift+wheel, A/D) and resets; its axis follows', async () => {
	const errs = consoleErrors.length;
	await openTimeline();
	const full = await view();
	const t0 = BigInt(TRUTH.timeline_t0_ns);
	const t1 = await ticks();
	assert.ok(t1.labels.length >= 4, `the axis has ticks: ${t1.labels}`);
	assert.ok(t1.labels.every((l) => /^(0|\d+(\.\d+)? (s|ms))$/.test(l)), `whole range in s: ${t1.labels}`);
	assert.equal(await page.$eval('#gpu-tl-reset', (e) => e.disabled), true, 'nothing to reset');
	// ctrl+wheel over the first kernel zooms in around it: the view is
	// shorter, and the kernel stays under the pointer.
	const k = (await bars()).find((b) => b.lane === '0/13');
	await page.mouse.move(k.x + 0.5, k.y + k.h / 2);
	const frac = (v, t) => Number(t - v.start) / Number(v.span);
	const at0 = frac(full, t0);
	await page.keyboard.down('Control');
	await page.mouse.wheel(0, -200);
	await page.keyboard.up('Control');
	let v = await viewWhen(`(s, e) => e - s < ${full.span}n`);
	assert.ok(v.span < full.span * 8n / 10n, `ctrl+wheel zoomed in: ${v.span} of ${full.span} ns`);
	near(frac(v, t0), at0, 2 / 1200, 'the kernel stays under the pointer');
	assert.equal(new URL(page.url()).searchParams.get('from'), RANGE.from, 'zooming leaves the page\'s range');
	// On in, the pointer on the kernel, to 50 ms and less: the axis is in
	// ms, the kernel wide.
	let x = k.x + 0.5, y = k.y + k.h / 2;
	while (v.span >= 50000000n) {
		const kb = (await bars()).find((b) => b.lane === '0/13' && b.name === TRUTH.timeline_kernel);
		x = kb.x + Math.min(kb.w / 2, 0.5);
		await page.mouse.move(x, y);
		const prev = v;
		await page.keyboard.down('Control');
		await page.mouse.wheel(0, -300);
		await page.keyboard.up('Control');
		v = await viewWhen(`(s, e) => e - s < ${prev.span}n`);
		assert.ok(v.start <= t0 && t0 < v.end, `the kernel stays in view at ${v.span} ns`);
	}
	const t2 = await ticks();
	assert.ok(t2.labels.some((l) => / ms$/.test(l)) && t2.labels.every((l) => /^(0|\d+(\.\d+)? (ms|µs))$/.test(l)),
		  `the ticks are in ms at ${v.span} ns: ${t2.labels}`);
	assert.notDeepEqual(t2.labels, t1.labels, 'the axis follows the zoom');
	await panelShot('11-gpu-timeline-zoomed');
	const wide = (await bars()).find((b) => b.lane === '0/13' && b.x <= x && x < b.x + b.w);
	assert.ok(wide && wide.w > 10, `the kernel is wide now: ${JSON.stringify(wide)}`);
	assert.equal(await page.$eval('#gpu-tl-reset', (e) => e.disabled), false, 'reset offered');
	// W zooms in (by 0.8), S out, around the pointer.
	let before = v;
	await page.keyboard.press('w');
	v = await viewWhen(`(s, e) => e - s < ${before.span}n`);
	near(Number(v.span) / Number(before.span), 0.8, 0.01, 'W: the view 0.8 as long');
	before = v;
	await page.keyboard.press('s');
	v = await viewWhen(`(s, e) => e - s > ${before.span}n`);
	near(Number(v.span) / Number(before.span), 1 / 0.8, 0.01, 'S: the view 1.25 as long');
	// D pans right by a tenth of the view, A back.
	before = v;
	await page.keyboard.press('d');
	v = await viewWhen(`(s) => s > ${before.start}n`);
	near(Number(v.start - before.start) / Number(before.span), 0.1, 0.001, 'D: a tenth to the right');
	assert.equal(v.span, before.span, 'panning keeps the span');
	await page.keyboard.press('a');
	v = await viewWhen(`(s) => s < ${v.start}n`);
	near(Number(v.start - before.start), 0, 2, 'A: back');
	// Shift+drag pans: the time under the pointer follows it.
	before = v;
	const w = await page.$eval('#gpu-timeline canvas.gpu-tl-axis', (c) => c.clientWidth);
	await page.keyboard.down('Shift');
	await page.mouse.down();
	await page.mouse.move(x - 200, y, { steps: 4 });
	await page.mouse.up();
	await page.keyboard.up('Shift');
	v = await viewWhen(`(s) => s > ${before.start}n`);
	near(Number(v.start - before.start), 200 / w * Number(before.span), Number(before.span) / w,
	     'shift+drag 200 px left shows 200 px further on');
	assert.equal(v.span, before.span, 'panning keeps the span');
	assert.equal(new URL(page.url()).searchParams.get('from'), RANGE.from, 'a pan selects no range');
	// Shift+wheel pans too.
	before = v;
	await page.keyboard.down('Shift');
	await page.mouse.wheel(0, 100);
	await page.keyboard.up('Shift');
	v = await viewWhen(`(s) => s > ${before.start}n`);
	assert.equal(v.span, before.span, 'shift+wheel pans');
	// Reset: the whole range again.
	await page.click('#gpu-tl-reset');
	v = await viewWhen(`(s, e) => s === ${full.start}n && e === ${full.end}n`);
	assert.deepEqual(await ticks(), t1, 'the axis of the whole range again');
	assert.equal(await page.$eval('#gpu-tl-reset', (e) => e.disabled), true);
	// The keys work with the timeline focused, the pointer elsewhere.
	await page.mouse.move(0, 0);
	await page.focus('#gpu-timeline .gpu-tl-body');
	await page.keyboard.press('W');
	v = await viewWhen(`(s, e) => e - s < ${full.span}n`);
	near(Number(v.span) / Number(full.span), 0.8, 0.01, 'W with the focus, about the middle');
	near(Number(v.start - full.start) / Number(full.span), 0.1, 0.01, 'about the middle');
	// ...and not while typing in the filter.
	await page.focus('#gpu-query');
	await page.keyboard.type('ws');
	await page.fill('#gpu-query', '');
	assert.equal((await view()).span, v.span, 'keys typed in a field leave the view');
	// A plain drag across a lane still selects a range of the page, in
	// the zoomed view's times.
	await page.$eval('#gpu-timeline .gpu-tl-body', (e) => e.scrollIntoView({ block: 'center' }));
	const lane = await page.$eval('#gpu-timeline .gpu-tl-lane[data-stream="13"] canvas', (c) => {
		const r = c.getBoundingClientRect();
		return { x: r.left, y: r.top + r.height / 2, w: r.width };
	});
	const cur = await view();
	const want = (px) => Number(cur.start / 1000000n) + Number(cur.span) * px / lane.w / 1e6;
	await page.mouse.move(lane.x + 100, lane.y);
	await page.mouse.down();
	await page.mouse.move(lane.x + 400, lane.y, { steps: 5 });
	await page.mouse.up();
	await page.waitForFunction((f) => new URL(location.href).searchParams.get('from') !== f, RANGE.from);
	await idle();
	const u = new URL(page.url()).searchParams;
	near(+u.get('from'), want(100), 2, 'the selection starts under the press');
	near(+u.get('until'), want(400), 2, 'and ends under the release');
	assert.deepEqual(consoleErrors.slice(errs), [], 'no console errors');
});

test('the GPU page says which source each number came from; a process with launches and no timed kernels is told how to time them', async () => {
	const errs = consoleErrors.length;
	await openTimeline();
	const src = (sel) => page.$$eval(sel, (s) => s.map((x) => `${x.dataset.source}: ${x.textContent}`));
	assert.deepEqual(await src('#gpu-timeline h3 .gpu-source'), ['cupti: timed on the GPU by CUPTI'],
			 'the timeline: CUPTI');
	for (const c of ['launches', 'wait'])
		assert.deepEqual(await src(`#chart-${c} .chart-title .gpu-source`), ['probes: seen at the CUDA call'],
				 `${c}: the probes`);
	const about = await page.textContent('#gpu-timeline-about');
	assert.match(about, /3 kernels, 6(\.0)? ms on the GPU, 1 copy \(2(\.0)? ms\), 1 host wait \(2(\.0)? ms\) in this range/,
		     `the kernels' time on the GPU: ${about}`);
	assert.match(about, /timed on the GPU by CUPTI \(Sonde's CUPTI library in the job\)/);
	assert.match(about, /seen at the CUDA call \(Sonde's probes\)/);
	// The processes with launches and no spans are named, with the fix.
	const untimed = await page.textContent('#gpu-timeline-untimed');
	assert.match(untimed, /No kernels timed on the GPU for .*train_job/, untimed);
	assert.ok(!untimed.includes(TRUTH.timeline_process + ','), `${TRUTH.timeline_process} has its kernels`);
	assert.match(untimed, /CUDA_INJECTION64_PATH=<path>\/libsonde_cupti\.so/);
	// The drill-down into the process with spans (comm="python3" asks the
	// timeline for process="python3"): its lanes.
	await go({ view: 'gpu', ...RANGE, gpu_query: drillQuery(TRUTH.timeline_process) });
	assert.equal(await page.$$eval('#gpu-timeline .gpu-tl-lane', (l) => l.length), 3,
		     'the drill-down shows its lanes (two streams, the host waits)');
	assert.equal(await page.$$eval('#gpu-timeline-untimed', (l) => l.length), 0, 'and no process untimed');
	// A job with launches and no spans: the API answers none, and the panel
	// says how to time its kernels rather than showing an empty box.
	const answer = page.waitForResponse((r) => r.url().includes('/api/v1/gpu/timeline'));
	await go({ view: 'gpu', ...RANGE, gpu_query: drillQuery(JOB) });
	const tl = await (await answer).json();
	assert.equal(tl.spans, 0, 'no spans for the job');
	assert.ok(TRUTH.gpu_names[JOB].launches > 0, 'the job made launches');
	const empty = await page.textContent('#gpu-timeline #gpu-timeline-empty');
	assert.match(empty, /^No kernels timed on the GPU for this range: start the job with CUDA_INJECTION64_PATH=<path>\/libsonde_cupti\.so .*see docs\/cli\.md/,
		     empty);
	assert.ok(empty.includes(`${JOB} launched ${fmtCount(TRUTH.gpu_names[JOB].launches)} kernels here (seen at the CUDA call)`),
		  `the launches the probes saw: ${empty}`);
	assert.equal(await page.$$eval('#gpu-timeline canvas', (c) => c.length), 0, 'no empty lanes');
	await page.$eval('#gpu-timeline', (e) => e.scrollIntoView());
	await panelShot('11-gpu-timeline-untimed');
	assert.deepEqual(consoleErrors.slice(errs), [], 'no console errors');
});
