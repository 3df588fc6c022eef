// gpu.js: the GPU page -- memory per process, kernel launches and time
// waiting on the GPU per second, NCCL collectives, and the alerts -- from
// the agents' metric points and the gpu_* profiles. Loaded by app.js.

import { TimeChart } from './charts.js';
import { fmtCount, fmtDuration, fmtBytes, resolveTime, escapeHTML } from './format.js';
import { S, hooks, cleanups, isCurrent, setState, api, showError, emptyState, range, stepFor,
	 timelineData, toolbar } from './page.js';
import { alertsTable } from './alerts.js';

function seriesLabel(labels, keys) {
	const parts = [];
	if (labels.comm)
		parts.push(labels.comm);
	if (labels.pid)
		parts.push('pid ' + labels.pid);
	for (const k of keys)
		if (labels[k] !== undefined && k !== 'comm' && k !== 'pid')
			parts.push(`${k === 'gpu_id' ? 'gpu' : k} ${labels[k]}`);
	return parts.join(' · ') || '(all)';
}

export async function renderGpu(main, gen) {
	const bar = toolbar(main, false);
	bar.innerHTML = '<form id="gpu-query-form" class="inline"><label>Filter ' +
		'<input id="gpu-query" spellcheck="false" placeholder="{node=&quot;gpu-7&quot;, ' +
		'pid=&quot;4242&quot;}"></label><button>Apply</button></form>';
	bar.querySelector('#gpu-query').value = S.gpu_query;
	bar.querySelector('form').addEventListener('submit', (e) => {
		e.preventDefault();
		setState({ gpu_query: bar.querySelector('#gpu-query').value.trim() });
	});
	const gq = S.gpu_query;
	const r = range();
	const step = stepFor(S.from, S.until);
	const [mem, plaunch, pwait, launch, wait, ncalls, nsecs, alerts] = await Promise.allSettled([
		api('/api/v1/points', { name: 'gpu_memory_used_bytes', query: gq, ...r }),
		api('/api/v1/points', { name: 'cuda_launches', query: gq, ...r }),
		api('/api/v1/points', { name: 'cuda_sync_wait_seconds', query: gq, ...r }),
		api('/api/v1/timeseries', { type: 'gpu_launch', query: gq, ...r, step }),
		api('/api/v1/timeseries', { type: 'gpu_wait', query: gq, ...r, step }),
		api('/api/v1/points', { name: 'nccl_calls', query: gq, ...r }),
		api('/api/v1/points', { name: 'nccl_seconds', query: gq, ...r }),
		api('/api/v1/alerts', {})]);
	if (!isCurrent(gen))
		return;
	for (const x of [mem, plaunch, pwait, launch, wait, ncalls, nsecs, alerts])
		if (x.status !== 'fulfilled')
			showError(x.reason);
	const ok = (x) => (x.status === 'fulfilled' ? x.value : null);
	const f = resolveTime(S.from), u = resolveTime(S.until);
	const tsHas = (t) => t && t.values && t.values.some((v) => v > 0);
	const ptsHas = (p) => p && p.series && p.series.some((s) => s.points.length);
	const any = ptsHas(ok(mem)) || ptsHas(ok(plaunch)) || tsHas(ok(launch)) || tsHas(ok(wait)) ||
		ptsHas(ok(ncalls));
	const grid = document.createElement('div');
	grid.className = 'gpu-grid';
	if (!any)
		emptyState(main, 'No GPU data in this range',
			   '<p>GPU memory, kernel launches, synchronisation waits and NCCL collectives come ' +
			   'from <code>sonde agent</code> (or <code>sonde run</code>) on a machine whose ' +
			   'programs use the CUDA runtime or NCCL (<code>libcudart</code>, ' +
			   '<code>libnccl</code>): start one there with <code>--server http://' +
			   `${escapeHTML(location.host)}</code>, run the workload, and come back. ` +
			   'Or pick a longer time range above.</p>');
	else
		main.append(grid);
	const chart = (name, title, format, data, emptyText, base2 = false) => {
		const box = document.createElement('div');
		box.className = 'panel';
		box.id = 'chart-' + name;
		grid.append(box);
		const c = new TimeChart(box, { title, format, emptyText, base2, height: 170, selectable: true,
			onSelect: (a, b) => setState({ from: String(a), until: String(b) }) });
		cleanups.push(() => c.destroy());
		c.setData({ from: data.from ?? f, until: data.until ?? u, series: data.series });
		hooks.charts[name] = c;
	};
	if (any) {
		const m = ok(mem);
		chart('memory', 'GPU memory used per process', fmtBytes, {
			series: (m ? m.series : []).map((s) => ({ label: seriesLabel(s.labels, ['gpu_id', 'node']),
								   points: s.points })) },
		      'No GPU memory samples', true);
		const rate = (ts, label) => {
			if (!ts)
				return { series: [] };
			const d = timelineData(ts);
			d.series[0].label = label;
			return d;
		};
		// Per process from the agent's per-second points (each the count or
		// the seconds in that second); from the profiles, per selection,
		// where there are no points (a Pyroscope client's gpu_* profiles).
		const perProcess = (p, scale) => ({
			series: p.series.map((s) => ({ label: seriesLabel(s.labels, ['node']),
						      points: s.points.map(([t, v]) => [t, v * scale]) })) });
		chart('launches', 'Kernel launches per second', (v) => fmtCount(v) + '/s',
		      ptsHas(ok(plaunch)) ? perProcess(ok(plaunch), 1) : rate(ok(launch), 'launches/s'),
		      'No kernel launches');
		chart('wait', 'Time waiting on the GPU (per second of wall time)',
		      (v) => fmtDuration(v / 1e9) + '/s',
		      ptsHas(ok(pwait)) ? perProcess(ok(pwait), 1e9) : rate(ok(wait), 'wait'),
		      'No GPU waits');
		const calls = ok(ncalls), secs = ok(nsecs);
		const byOp = (p) => {
			const out = new Map();
			for (const s of (p && p.series) || []) {
				const key = seriesLabel(s.labels, ['op', 'node']);
				const mm = out.get(key) || new Map();
				for (const [t, v] of s.points)
					mm.set(t, (mm.get(t) || 0) + v);
				out.set(key, mm);
			}
			return out;
		};
		const c = byOp(calls), sdur = byOp(secs);
		const mean = [];
		for (const [k, tm] of sdur) {
			const cm = c.get(k) || new Map();
			mean.push({ label: k, points: [...tm].sort((a, b) => a[0] - b[0])
				.map(([t, v]) => [t, cm.get(t) ? v / cm.get(t) : null]) });
		}
		chart('nccl-duration', 'NCCL collective duration (mean per call)', fmtDuration,
		      { series: mean }, 'No NCCL collectives');
		chart('nccl-calls', 'NCCL calls per second', (v) => fmtCount(v) + '/s',
		      { series: [...c].map(([k, tm]) => ({ label: k,
			      points: [...tm].sort((a, b) => a[0] - b[0]) })) }, 'No NCCL collectives');
	}
	const abox = document.createElement('div');
	abox.className = 'panel';
	main.append(abox);
	alertsTable(abox, ok(alerts));
}
