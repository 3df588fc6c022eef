// gpu.mjs: the browser tests of the GPU page (ui/js/gpu.js) and its charts
// (ui/js/charts.js), registered with harness.mjs's runner; imported by
// run.mjs. testdata.py's GPU_PROCS is the truth: 16 process names on three
// devices, a job restarted twice, one process exiting early, one starting
// late; its SHARES, what bounded some of them (verdicts_by_name, _by_pid).

import assert from 'node:assert/strict';
import { TRUTH, RANGE, test, page, near, go, idle, frames, shot } from './harness.mjs';
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

test('the kernel timeline draws each kernel as a bar; hover shows its name and stack', async () => {
	await go({ view: 'gpu', ...RANGE });
	await page.waitForSelector('#gpu-timeline .gpu-tl-bar');
	const lanes = await page.$$eval('#gpu-timeline .gpu-tl-lane',
		(ls) => ls.map((l) => `${l.dataset.device}/${l.dataset.stream}:` +
			       l.querySelectorAll('.gpu-tl-bar').length));
	assert.deepEqual(lanes, ['0/7:1', '0/13:3'], 'a lane per device and stream, a bar per span');
	const head = await page.textContent('#gpu-timeline .gpu-tl-proc');
	assert.match(head, /trainer · pid 4242 · gpu-7/);
	const bar = page.locator('#gpu-timeline .gpu-tl-lane[data-stream="13"] .gpu-tl-bar').first();
	await bar.scrollIntoViewIfNeeded();
	const box = await bar.boundingBox();
	assert.ok(box.width >= 2, `the bar has a width (${box.width})`);
	// (Its kernels overlap at this range's scale: any of them is the
	// same kernel.)
	await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
	const tip = page.locator('#gpu-timeline .gpu-tl-tip');
	await tip.waitFor({ state: 'visible' });
	const text = await tip.textContent();
	assert.ok(text.includes(TRUTH.timeline_kernel), `hover names the kernel: ${text}`);
	assert.ok(text.includes('stream 13'), `hover names the stream: ${text}`);
	assert.ok(text.includes('2 ms') || text.includes('2.00 ms') || /2(\.0+)? ?ms/.test(text),
		  `hover gives its duration: ${text}`);
	for (const f of TRUTH.timeline_from.split(' < '))
		assert.ok(text.includes(f), `hover shows the launching stack (${f}): ${text}`);
});
