// gpu.mjs: the browser tests of the GPU page (ui/js/gpu.js), registered
// with harness.mjs's runner; imported by run.mjs.

import assert from 'node:assert/strict';
import { TRUTH, RANGE, test, page, near, go, shot } from './harness.mjs';

test('the GPU page charts memory, launches, waits and NCCL, and lists alerts', async () => {
	await go({ view: 'gpu', ...RANGE });
	const charts = await page.evaluate(() => Object.fromEntries(Object.entries(window.__sonde.charts)
		.map(([k, c]) => [k, c.data.series.map((s) => ({ label: s.label, step: s.step,
								 points: s.points }))])));
	for (const k of ['memory', 'launches', 'wait', 'nccl-duration', 'nccl-calls'])
		assert.ok(charts[k] && charts[k].length, `chart ${k} has series`);
	assert.equal(charts.memory.length, 2, 'one memory line per process and GPU');
	const peak = Math.max(...charts.memory.flatMap((s) => s.points.map((p) => p[1])));
	near(peak, TRUTH.memory_peak_bytes, TRUTH.memory_peak_bytes * 0.01, 'memory peak');
	// Launches and waits: a line per process from the agent's per-second points.
	const sum = (s) => s.points.reduce((a, p) => a + p[1], 0);
	for (const [k, truth, scale] of [['launches', TRUTH.launches_by_pid, 1],
					 ['wait', TRUTH.wait_s_by_pid, 1e9]]) {
		assert.equal(charts[k].length, Object.keys(truth).length, `${k}: one line per process`);
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
			near(p[1], TRUTH.nccl_mean_s, 1e-9, 'NCCL mean duration');
	// The charts are drawn: their plot areas hold coloured pixels.
	const painted = await page.evaluate(() => Object.values(window.__sonde.charts).map((c) => {
		const d = c.ctx.getImageData(0, 0, c.canvas.width, c.canvas.height).data;
		let n = 0;
		for (let i = 0; i < d.length; i += 4)
			if (d[i + 3] && Math.abs(d[i] - d[i + 2]) > 60)
				n++;
		return n;
	}));
	assert.ok(painted.every((n) => n > 20), `every chart has coloured lines: ${painted}`);
	const labels = await page.$$eval('#chart-memory .legend span', (s) => s.map((x) => x.innerText));
	assert.ok(labels.some((l) => l.includes('pid 4242')), `legend names the processes: ${labels}`);
	const alerts = await page.$$eval('#alerts-table tbody tr', (trs) => trs.map((tr) => [
		tr.querySelector('.status').innerText, tr.querySelectorAll('td')[1].innerText]));
	assert.deepEqual(alerts.map((a) => a[1]).sort(), [...TRUTH.alerts].sort());
	assert.equal(alerts[0][0], 'firing', 'firing alerts first');
	await shot('11-gpu');
});
