// gpu.js: the GPU page -- what bounds each process over the range (its
// verdict, and where its leading thread's time went), memory, kernel
// launches and time waiting on the GPU a line per process name (a job's
// restarts, new pids under one name, are one line and one legend entry), a
// drill-down to one name's pids, a panel per device (node and GPU) of the
// memory each process holds there with the device's total and capacity,
// NCCL collectives, the kernel timeline (gpu_timeline.js), and the alerts -- from the agents' metric points and the
// gpu_* profiles. Loaded by app.js.
//
// The drill-down is a comm="NAME" matcher in the page's filter (gpu_query,
// in the URL): a legend entry or the Process picker sets it. The points are
// asked for without it -- the picker lists every name, and NCCL, whose
// points name no process, stays -- and filtered here.

import { TimeChart, colorMap, typicalStep } from './charts.js';
import { fmtCount, fmtDuration, fmtBytes, resolveTime, escapeHTML } from './format.js';
import { S, hooks, cleanups, isCurrent, setState, api, showError, emptyState, range, stepFor,
	 timelineData, toolbar, parseMatchers, formatMatchers } from './page.js';
import { alertsTable } from './alerts.js';
import { timelinePanel, SOURCE_PROBES } from './gpu_timeline.js';
import { STATES, STATE_INFO, SHOWN_SHARE, meanShares, judge, verdictText, fmtShare,
	 shown } from './verdict.js';

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

// The drill-down's process name in a filter, and the filter without it.
export function splitDrill(query) {
	const ms = parseMatchers(query);
	const i = ms.findIndex(([k, op]) => k === 'comm' && op === '=');
	if (i < 0)
		return { name: '', rest: (query || '').trim() };
	const name = ms[i][2];
	ms.splice(i, 1);
	return { name, rest: ms.length ? formatMatchers(ms) : '' };
}

// The filter for the kernel timeline: its spans name their process
// process="NAME" (the agent's labels), the points comm="NAME".
export function timelineQuery(query) {
	const ms = parseMatchers(query);
	if (!ms.some(([k]) => k === 'comm'))
		return query || '';
	return formatMatchers(ms.map(([k, op, v]) => [k === 'comm' ? 'process' : k, op, v]));
}

// The filter with the drill-down on name ('' for none).
export function withDrill(query, name) {
	const ms = parseMatchers(splitDrill(query).rest);
	if (name)
		ms.unshift(['comm', '=', name]);
	return ms.length ? formatMatchers(ms) : '';
}

// Points as the API answers them ("NaN", "+Inf" for values not finite):
// numbers, or null where there is no value to draw.
const value = (v) => (typeof v === 'number' && Number.isFinite(v) ? v : null);
const clean = (series) => (series || []).map((s) => ({ labels: s.labels || {},
	points: s.points.map(([t, v]) => [t, value(v)]) }));

// One series from several: their points put in buckets of their usual step
// and summed. gauge: a level (memory), each member's last value in a
// bucket, held over one missing bucket between two of its own (samples
// of different nodes or processes do not fall in the same millisecond);
// else amounts per interval (launches in that second), all summed.
export function merge(members, gauge) {
	let step = 0;
	for (const m of members)
		step = Math.max(step, typicalStep(m.points));
	if (members.length === 1)
		return { step, points: members[0].points.filter((p) => p[1] !== null) };
	const b = step || 1000;
	const sum = new Map();
	const add = (t, v) => sum.set(t, (sum.get(t) || 0) + v);
	for (const m of members) {
		const own = new Map();
		for (const [t, v] of m.points)
			if (v !== null) {
				const k = Math.floor(t / b) * b;
				own.set(k, gauge ? v : (own.get(k) || 0) + v);
			}
		let prev = null;
		for (const [k, v] of own) {
			add(k, v);
			if (gauge && prev && k - prev[0] === 2 * b)
				add(prev[0] + b, prev[1]);
			prev = [k, v];
		}
	}
	return { step, points: [...sum].sort((x, y) => x[0] - y[0]) };
}

const numeric = (a, b) => a.localeCompare(b, 'en', { numeric: true });
const byLabel = (a, b) => numeric(a.label, b.label);

// Series grouped by process name, or, in the drill-down on a name, by its
// pids (and node where there are several): [{label, comm, members, pids}],
// in order of label. The charts' lines and the verdicts' rows.
function groups(series, drill) {
	const mine = series.filter((s) => !drill || s.labels.comm === drill);
	const nodes = new Set(mine.map((s) => s.labels.node));
	const out = new Map();
	for (const s of mine) {
		const l = s.labels;
		let label;
		if (drill)
			label = `${drill} · pid ${l.pid ?? '?'}` +
				(nodes.size > 1 && l.node ? ` · ${l.node}` : '');
		else
			label = l.comm || (l.pid ? 'pid ' + l.pid : '(no process)');
		const g = out.get(label) || { label, comm: l.comm || '', members: [], pids: new Set() };
		g.members.push(s);
		if (l.pid)
			g.pids.add(l.pid);
		out.set(label, g);
	}
	return [...out.values()].map((g) => ({ ...g, pids: [...g.pids] })).sort(byLabel);
}

// Series as lines (groups above), each knowing its pids.
function lines(series, drill, gauge) {
	return groups(series, drill).map((g) => ({ label: g.label, comm: g.comm, pids: g.pids,
						   ...merge(g.members, gauge) }));
}

const scaled = (ls, k) => ls.map((s) => ({ ...s, points: s.points.map(([t, v]) => [t, v * k]) }));

// A panel per device: memory points with a gpu_id, by node and GPU.
function devices(mem, cap, drill) {
	const out = new Map();
	for (const s of mem) {
		const l = s.labels;
		if (l.gpu_id === undefined)
			continue;
		const key = `${l.node || ''}/${l.gpu_id}`;
		const d = out.get(key) || { key, node: l.node || '', gpu: l.gpu_id, series: [], cap: null };
		d.series.push(s);
		out.set(key, d);
	}
	for (const s of cap) {
		const d = out.get(`${s.labels.node || ''}/${s.labels.gpu_id}`);
		if (d)
			d.cap = s.points.filter((p) => p[1] !== null);
	}
	const list = [...out.values()].map((d) => ({ ...d, lines: lines(d.series, drill, true),
						      total: merge(d.series, true) }));
	return list.filter((d) => !drill || d.lines.length)
		.sort((a, b) => numeric(a.node, b.node) || numeric(a.gpu, b.gpu));
}

// Each state's colour in the verdicts' bars, of distinct hues, each at
// least 3:1 against the panel in both themes (#fff, #1e2129); sleep grey.
const STATE_COLORS = { gpu_wait: '#05a92e', collective: '#716df6', dataloader_wait: '#f9601f',
		       on_cpu: '#0a72da', lock: '#d6334a', io: '#ac9003', sleep: '#7c7c8c' };

// The verdict of each group (groups()) of process_time_share series over
// the range: [{label, comm, pids, samples, means, verdict, state}].
export function verdicts(series, drill) {
	return groups(series, drill).map((g) => ({ label: g.label, comm: g.comm, pids: g.pids,
						   ...meanShares(g.members) }))
		.filter((r) => r.samples).map((r) => ({ ...r, ...judge(r.means) }));
}

// "What bounds each process": a row per process name (per pid in the
// drill-down) with its verdict over the range, a bar of its states' mean
// shares (as wide as the window is, each state its colour, titled with its
// share; described for screen readers by its label) and the shares in
// words; drillTo(name) from a name. An empty state when there are none.
function boundsSection(host, shares, drill, drillTo) {
	const rows = verdicts(shares, drill);
	hooks.verdicts = rows;
	const sec = document.createElement('section');
	sec.className = 'panel gpu-verdicts';
	sec.id = 'gpu-verdicts';
	sec.setAttribute('aria-labelledby', 'gpu-verdicts-title');
	sec.innerHTML = '<h3 id="gpu-verdicts-title">What bounds each process' +
		(drill ? ` — ${escapeHTML(drill)}, per pid` : '') + '</h3>';
	host.append(sec);
	if (!rows.length) {
		sec.insertAdjacentHTML('beforeend', '<p class="verdicts-empty muted">No verdicts yet: they ' +
			'come from <code>sonde agent</code> at the end of each window (<code>--window</code>, ' +
			'10 s by default), for each process its GPU probes follow.</p>');
		return;
	}
	sec.insertAdjacentHTML('beforeend', '<p class="verdicts-about muted">Where the leading thread ' +
		'spent the wall time, each state&#39;s mean share over the seconds the process had a ' +
		'verdict in this range; it is bound by the largest when that is at least 20 %, else ' +
		'idle.</p><ul class="legend verdicts-legend" aria-label="States">' +
		STATES.map((st) => `<li class="legend-item" title="${escapeHTML(STATE_INFO[st].what)}">` +
			   `<i style="background:${STATE_COLORS[st]}"></i>${st}</li>`).join('') + '</ul>');
	const table = document.createElement('table');
	table.className = 'data verdicts';
	table.setAttribute('aria-labelledby', 'gpu-verdicts-title');
	table.innerHTML = '<colgroup><col class="c-proc"><col class="c-verdict"><col class="c-bar">' +
		'<col></colgroup><thead><tr><th scope="col">Process</th><th scope="col">Verdict</th>' +
		'<th scope="col">Where the time went</th><th scope="col">Shares</th></tr></thead>';
	const body = document.createElement('tbody');
	for (const r of rows) {
		const list = shown(r.means);
		const words = list.map(([st, v]) => `${st} ${fmtShare(v)}`).join(', ') || 'nothing';
		// On a CPU, a thread's time may pass the window a little (samples):
		// the bar then fits its states in its width.
		const total = STATES.reduce((a, st) => a + (r.means[st] >= SHOWN_SHARE ? r.means[st] : 0), 0);
		const k = total > 1 ? 1 / total : 1;
		const segs = STATES.filter((st) => r.means[st] >= SHOWN_SHARE).map((st) => {
			const t = `${st} ${fmtShare(r.means[st])}`;
			return `<span class="seg" data-state="${st}" title="${t}" style="width:` +
				`${(r.means[st] * k * 100).toFixed(4)}%;background:${STATE_COLORS[st]}"></span>`;
		}).join('');
		const tr = document.createElement('tr');
		tr.dataset.key = r.label;
		tr.dataset.verdict = r.verdict;
		const who = escapeHTML(r.label);
		const name = !drill && r.comm
			? `<button type="button" class="link drill" title="${escapeHTML(
				`${r.comm}: pid${r.pids.length === 1 ? '' : 's'} ${r.pids.join(', ')} -- click ` +
				'to show each')}">${who}</button>`
			: who;
		tr.innerHTML = `<td class="proc">${name}</td><td class="verdict">` +
			(r.state ? `<i style="background:${STATE_COLORS[r.state]}"></i>` : '<i></i>') +
			`${verdictText(r.verdict)}</td><td><div class="share-bar" role="img" ` +
			`aria-label="${escapeHTML(r.label)}: ${verdictText(r.verdict)}; ${words}">${segs}` +
			`</div></td><td class="shares">${words}</td>`;
		const b = tr.querySelector('button.drill');
		if (b)
			b.addEventListener('click', () => drillTo(r.comm));
		body.append(tr);
	}
	table.append(body);
	sec.append(table);
}

export async function renderGpu(main, gen) {
	const { name: drill, rest } = splitDrill(S.gpu_query);
	const bar = toolbar(main, false);
	bar.innerHTML = '<label>Process <select id="gpu-process"></select></label>' +
		'<form id="gpu-query-form" class="inline"><label>Filter ' +
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
	const pts = (name) => api('/api/v1/points', { name, query: rest, ...r });
	const all = await Promise.allSettled([
		pts('gpu_memory_used_bytes'), pts('gpu_memory_capacity_bytes'), pts('cuda_launches'),
		pts('cuda_sync_wait_seconds'),
		api('/api/v1/timeseries', { type: 'gpu_launch', query: gq, ...r, step }),
		api('/api/v1/timeseries', { type: 'gpu_wait', query: gq, ...r, step }),
		pts('nccl_calls'), pts('nccl_seconds'), pts('process_time_share'),
		api('/api/v1/alerts', {}),
		api('/api/v1/gpu/timeline', { query: timelineQuery(gq), ...r })]);
	if (!isCurrent(gen))
		return;
	const [mem, cap, plaunch, pwait, launch, wait, ncalls, nsecs, pshare, alerts, tline] = all;
	for (const x of all)
		if (x.status !== 'fulfilled')
			showError(x.reason);
	const ok = (x) => (x.status === 'fulfilled' ? x.value : null);
	const okPts = (x) => clean(ok(x) && ok(x).series);
	const f = resolveTime(S.from), u = resolveTime(S.until);
	const memS = okPts(mem), launchS = okPts(plaunch), waitS = okPts(pwait);
	const shareS = okPts(pshare);
	const names = [...new Set([...memS, ...launchS, ...waitS, ...shareS].map((s) => s.labels.comm)
		.filter(Boolean))].sort(numeric);
	if (drill && !names.includes(drill))
		names.unshift(drill);
	const pick = bar.querySelector('#gpu-process');
	pick.innerHTML = '<option value="">All processes</option>' +
		names.map((n) => `<option>${escapeHTML(n)}</option>`).join('');
	pick.value = drill;
	const drillTo = (name) => setState({ gpu_query: withDrill(S.gpu_query, name) });
	pick.addEventListener('change', () => drillTo(pick.value));
	if (drill) {
		const back = document.createElement('button');
		back.type = 'button';
		back.id = 'gpu-all';
		back.textContent = '← All processes';
		back.addEventListener('click', () => drillTo(''));
		bar.prepend(back);
	}

	const tsHas = (t) => t && t.values && t.values.some((v) => v > 0);
	const ptsHas = (p) => p.some((s) => s.points.some((x) => x[1] !== null));
	const any = ptsHas(memS) || ptsHas(launchS) || tsHas(ok(launch)) || tsHas(ok(wait)) ||
		ptsHas(okPts(ncalls)) || ptsHas(shareS);
	const grid = document.createElement('div');
	grid.className = 'gpu-grid';
	hooks.verdicts = [];
	if (!any)
		emptyState(main, 'No GPU data in this range',
			   '<p>GPU memory, kernel launches, synchronisation waits and NCCL collectives come ' +
			   'from <code>sonde agent</code> (or <code>sonde run</code>) on a machine whose ' +
			   'programs use the CUDA runtime or NCCL (<code>libcudart</code>, ' +
			   '<code>libnccl</code>): start one there with <code>--server http://' +
			   `${escapeHTML(location.host)}</code>, run the workload, and come back. ` +
			   'Or pick a longer time range above.</p>');
	else {
		boundsSection(main, shareS, drill, drillTo);
		main.append(grid);
	}
	const charts = []; // [host, name, opts, data], drawn once every colour is known
	const chart = (host, name, title, format, data, emptyText, more = {}) =>
		charts.push([host, name, { title, format, emptyText, height: 170, ...more }, data]);
	// Per process name: its legend entry drills down to its pids.
	const perName = drill ? {} : {
		onLegend: (s) => s.comm && drillTo(s.comm),
		legendTitle: (s) => (s.comm ? `${s.comm}: pid${s.pids.length === 1 ? '' : 's'} ` +
				     `${s.pids.join(', ')} -- click to show each` : ''),
	};
	const who = drill ? `${drill}, per pid` : 'per process';
	if (any) {
		chart(grid, 'memory', `GPU memory used ${who}`, fmtBytes,
		      { series: lines(memS, drill, true) }, 'No GPU memory samples',
		      { base2: true, ...perName });
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
		// Launches and waits are seen at the CUDA call (the probes); the
		// kernels' own time, on the timeline, is CUPTI's.
		const probes = { source: ['probes', SOURCE_PROBES], ...perName };
		chart(grid, 'launches', `Kernel launches per second, ${who}`, (v) => fmtCount(v) + '/s',
		      ptsHas(launchS) ? { series: lines(launchS, drill, false) }
			      : rate(ok(launch), 'launches/s'), 'No kernel launches', probes);
		chart(grid, 'wait', `Time waiting on the GPU (per second of wall time), ${who}`,
		      (v) => fmtDuration(v / 1e9) + '/s',
		      ptsHas(waitS) ? { series: scaled(lines(waitS, drill, false), 1e9) }
			      : rate(ok(wait), 'wait'), 'No GPU waits', probes);
		const byOp = (p) => {
			const out = new Map();
			for (const s of p) {
				const key = seriesLabel(s.labels, ['op', 'node']);
				const mm = out.get(key) || new Map();
				for (const [t, v] of s.points)
					if (v !== null)
						mm.set(t, (mm.get(t) || 0) + v);
				out.set(key, mm);
			}
			return out;
		};
		const c = byOp(okPts(ncalls)), sdur = byOp(okPts(nsecs));
		const mean = [];
		for (const [k, tm] of sdur) {
			const cm = c.get(k) || new Map();
			mean.push({ label: k, points: [...tm].sort((a, b) => a[0] - b[0])
				.map(([t, v]) => [t, cm.get(t) ? v / cm.get(t) : null]) });
		}
		chart(grid, 'nccl-duration', 'NCCL collective duration (mean per call)', fmtDuration,
		      { series: mean }, 'No NCCL collectives');
		chart(grid, 'nccl-calls', 'NCCL calls per second', (v) => fmtCount(v) + '/s',
		      { series: [...c].map(([k, tm]) => ({ label: k,
			      points: [...tm].sort((a, b) => a[0] - b[0]) })) }, 'No NCCL collectives');
		const devs = devices(memS, okPts(cap), drill);
		if (devs.length) {
			const sec = document.createElement('section');
			sec.className = 'gpu-devices-section';
			sec.innerHTML = '<h3>Memory per device' +
				(drill ? ' held by ' + escapeHTML(drill) : '') + '</h3>';
			const dgrid = document.createElement('div');
			dgrid.className = 'gpu-devices';
			sec.append(dgrid);
			main.insertBefore(sec, grid.nextSibling);
			for (const d of devs) {
				const peak = Math.max(0, ...d.total.points.map((p) => p[1]));
				const capNow = d.cap && d.cap.length ? d.cap[d.cap.length - 1][1] : null;
				const name = `GPU ${d.gpu}` + (d.node ? ` on ${d.node}` : '');
				// The capacity is in the title, not a line: 80 GiB would
				// flatten the processes' lines against the axis.
				const series = [...d.lines,
					{ label: 'total', points: d.total.points, step: d.total.step, color: '#7c7c8c',
					  width: 2, dash: [5, 3], noLegendClick: true }];
				const host = document.createElement('div');
				host.className = 'gpu-device';
				host.dataset.device = d.key;
				dgrid.append(host);
				const of = capNow ? ` of ${fmtBytes(capNow)} (${Math.round(peak / capNow * 100)} %)`
					: '';
				chart(host, 'device:' + d.key, `${name} — peak ${fmtBytes(peak)} used${of}`,
				      fmtBytes, { series }, 'No memory samples',
				      { base2: true, height: 130, ...perName });
			}
		}
	}
	// One colour per label across the page's charts (a process is one
	// colour in every chart), none repeated within one.
	const cm = colorMap(charts.flatMap(([, , , d]) => d.series.filter((s) => !s.color)
		.map((s) => s.label || '')));
	for (const [host, name, opts, data] of charts) {
		const alone = data.series.length === 1 && !data.series[0].label; // TimeChart's accent
		for (const s of data.series)
			s.color = s.color || (alone ? undefined : cm.get(s.label || ''));
		const box = document.createElement('div');
		box.className = 'panel';
		box.id = 'chart-' + name.replace(/[^A-Za-z0-9_-]+/g, '-');
		host.append(box);
		const c = new TimeChart(box, { ...opts, selectable: true,
			onSelect: (a, b) => setState({ from: String(a), until: String(b) }) });
		cleanups.push(() => c.destroy());
		c.setData({ from: data.from ?? f, until: data.until ?? u, series: data.series });
		hooks.charts[name] = c;
		const title = opts.source && c.el.querySelector('.chart-title');
		if (title)
			title.insertAdjacentHTML('beforeend', ` <span class="gpu-source" data-source=` +
				`"${opts.source[0]}">${opts.source[1]}</span>`);
	}
	// The kernel timeline: each kernel and copy of the range, by lane; where
	// there are none, which processes launched kernels all the same.
	if (ok(tline) && (ok(tline).spans || any)) {
		const launched = new Map();
		for (const g of groups(launchS, drill)) {
			const k = g.comm || g.label;
			launched.set(k, (launched.get(k) || 0) + g.members.reduce((a, m) =>
				a + m.points.reduce((b, p) => b + (p[1] || 0), 0), 0));
		}
		if (!ptsHas(launchS) && tsHas(ok(launch)))
			launched.set('the selection', ok(launch).values.reduce((a, v) => a + (v || 0), 0));
		timelinePanel(main, ok(tline), f, u,
			      (a, b) => setState({ from: String(a), until: String(b) }),
			      [...launched].filter(([, v]) => v > 0).map(([name, launches]) =>
				      ({ name, launches })));
	}
	const abox = document.createElement('div');
	abox.className = 'panel';
	main.append(abox);
	alertsTable(abox, ok(alerts));
}
