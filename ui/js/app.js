// app.js: the Sonde web UI, a single page over the server's API (docs/api.md).
// Views: the profile (timeline, flame graph, top functions, sandwich), the
// diff of two ranges, the GPU page (memory, launches, waits, NCCL) and the
// alerts. Everything a view shows is in the URL (query, from, until, view,
// ...), so a reload or a shared link shows the same thing. Loaded by
// index.html.

import { apiURL } from './api.js';
import { FlameGraph, DIFF_RED, DIFF_GREEN } from './flamegraph.js';
import { fromFlamebearer, nameMatcher, search, sandwich } from './model.js';
import { fmtValue, fmtPct, fmtDate, resolveTime, escapeHTML } from './format.js';
import { PROFILE_VIEWS, PICKS, RANGES, $, S, hooks, cleanups, setRenderer, newGeneration,
	 isCurrent, stateURL, writeState, setState, api, track, showError, clearErrors, emptyState,
	 NO_PROFILES, parseMatchers, formatMatchers, pickOf, withPick, range, stepFor, timeline,
	 timelineData, toolbar } from './page.js';
import { renderGpu } from './gpu.js';
import { renderAlerts } from './alerts.js';

// Fills the pickers from the label values in range (each narrowed by the
// ones before it) and picks a default profile type and service when the
// query has none. Resolves to false when there are no profiles at all.
async function loadPickers(gen) {
	const r = range();
	const vals = async (name, ms) => (await api('/api/v1/label/values', {
		name, query: ms.length ? formatMatchers(ms) : '', ...r,
	})).values || [];
	const types = await vals('type', []);
	if (!isCurrent(gen))
		return false;
	if (!types.length) {
		for (const [, id] of PICKS)
			$(id).innerHTML = '<option value="">(none)</option>';
		return false;
	}
	// Defaults only for an empty query: a typed one is the user's, as typed.
	let q = S.query;
	const fresh = !S.query.trim();
	if (fresh)
		q = withPick(q, 'type', types.includes('cpu') ? 'cpu' : types[0]);
	let ms = [];
	for (const [label, id] of PICKS) {
		const values = label === 'type' ? types : await vals(label, ms);
		if (!isCurrent(gen))
			return false;
		let cur = parseMatchers(q).find(([k, op]) => k === label && op === '=');
		cur = cur ? cur[2] : '';
		if (label === 'service_name' && !cur && values.length && fresh) {
			cur = values[0];
			q = withPick(q, label, cur);
		}
		const sel = $(id);
		const opts = label !== 'type' ? [['', 'all']] : cur ? [] : [['', '(any)']];
		for (const v of values)
			opts.push([v, v]);
		if (cur && !values.includes(cur))
			opts.push([cur, cur + ' (no data)']);
		sel.innerHTML = opts.map(([v, t]) => `<option value="${escapeHTML(v)}">${escapeHTML(t)}` +
					 '</option>').join('');
		sel.value = cur;
		if (cur)
			ms.push([label, '=', cur]);
	}
	if (q !== S.query) {
		S.query = q;
		writeState(false);
	}
	$('query').value = S.query;
	return true;
}

// ---- header -------------------------------------------------------------------------

function renderHeader() {
	for (const a of document.querySelectorAll('#nav a')) {
		const v = a.dataset.view;
		const active = v === 'both' ? PROFILE_VIEWS.includes(S.view) : S.view === v;
		a.classList.toggle('active', active);
		a.href = stateURL({ view: v });
	}
	const preset = $('range-preset');
	const known = RANGES.some(([v]) => v === S.from) && S.until === 'now';
	preset.innerHTML = RANGES.map(([v, t]) => `<option value="${v}">${t}</option>`).join('') +
		(known ? '' : '<option value="custom">Custom range</option>');
	preset.value = known ? S.from : 'custom';
	const f = resolveTime(S.from), u = resolveTime(S.until);
	$('range-label').textContent = Number.isFinite(f) && Number.isFinite(u)
		? `${fmtDate(f)} → ${fmtDate(u)}` : `${S.from} → ${S.until}`;
	$('query-form').hidden = S.view === 'gpu' || S.view === 'alerts';
	$('query').value = S.query;
}

function setupHeader() {
	for (const a of document.querySelectorAll('#nav a'))
		a.addEventListener('click', (e) => {
			e.preventDefault();
			setState({ view: a.dataset.view });
		});
	$('range-preset').addEventListener('change', (e) => {
		if (e.target.value !== 'custom')
			setState({ from: e.target.value, until: 'now', left_from: '', left_until: '',
				   right_from: '', right_until: '' });
	});
	$('zoom-out').addEventListener('click', () => {
		const f = resolveTime(S.from), u = resolveTime(S.until), span = u - f;
		const now = Date.now();
		const until = Math.min(now, u + span / 2);
		setState({ from: String(Math.round(until - span * 2)), until: until === now ? 'now'
			   : String(Math.round(until)) });
	});
	$('refresh').addEventListener('click', () => render());
	for (const [label, id] of PICKS)
		$(id).addEventListener('change', (e) => {
			let q = withPick(S.query, label, e.target.value);
			// A new service or type makes the narrower picks stale.
			const after = PICKS.slice(PICKS.findIndex(([l]) => l === label) + 1);
			for (const [l] of after)
				q = withPick(q, l, '');
			setState({ query: q, fn: '' });
		});
	$('query-form').addEventListener('submit', (e) => {
		e.preventDefault();
		setState({ query: $('query').value.trim() });
	});
}

// ---- the profile view: timeline, flame graph, top table, sandwich ---------------



function exportLinks(host) {
	const p = { query: S.query, from: S.from, until: S.until };
	const el = document.createElement('span');
	el.className = 'exports';
	const type = pickOf('type') || 'profile';
	el.innerHTML = `Export: <a id="export-pprof" download="sonde-${escapeHTML(type)}.pb.gz" ` +
		`href="${escapeHTML(apiURL('/api/v1/pprof', p))}">pprof</a> · ` +
		`<a id="export-speedscope" download="sonde-${escapeHTML(type)}.speedscope.json" ` +
		`href="${escapeHTML(apiURL('/api/v1/speedscope', p))}">speedscope</a> · ` +
		`<a id="open-speedscope" target="_blank" ` +
		`href="${escapeHTML(apiURL('speedscope.html', p))}">open in speedscope view</a> · ` +
		'<a id="export-png" href="#" title="The flame graph as drawn">png</a>';
	el.querySelector('#export-png').addEventListener('click', (e) => {
		e.preventDefault();
		const f = hooks.flame;
		if (!f) {
			showError('no flame graph on the page to save as png');
			return;
		}
		f.draw(true);
		f.canvas.toBlob((blob) => {
			const a = document.createElement('a');
			a.href = URL.createObjectURL(blob);
			a.download = `sonde-${type}-flamegraph.png`;
			a.click();
			setTimeout(() => URL.revokeObjectURL(a.href), 10000);
		});
	});
	host.append(el);
}


function searchBox(bar, onChange) {
	const wrap = document.createElement('span');
	wrap.className = 'search';
	wrap.innerHTML = '<input id="search" type="search" placeholder="Search functions (text or /regex/)" ' +
		'spellcheck="false"><span id="search-share" class="muted"></span>';
	bar.append(wrap);
	const input = wrap.querySelector('input');
	input.value = S.search;
	let t = null;
	input.addEventListener('input', () => {
		clearTimeout(t);
		t = setTimeout(() => {
			S.search = input.value;
			writeState(false);
			onChange();
		}, 120);
	});
	return wrap;
}

function orientButton(bar, flames) {
	const b = document.createElement('button');
	b.id = 'orient';
	const label = () => (b.textContent = S.orient === 'flame' ? 'Flame ▲ (root at bottom)'
		: 'Icicle ▼ (root on top)');
	label();
	b.title = 'Switch between flame (root at the bottom) and icicle (root on top)';
	b.addEventListener('click', () => {
		S.orient = S.orient === 'flame' ? 'icicle' : 'flame';
		writeState(false);
		label();
		for (const f of flames())
			f.setOrientation(S.orient);
	});
	bar.append(b);
}

function newFlame(host, name, opts = {}) {
	const f = new FlameGraph(host, {
		orientation: S.orient,
		onSandwich: (fn) => setState({ view: 'sandwich', fn }),
		...opts,
	});
	hooks.flames[name] = f;
	cleanups.push(() => f.destroy());
	return f;
}

// Applies the search to a flame graph and says what it matched.
function applySearch(flame, model, out) {
	let matcher = null;
	try {
		matcher = nameMatcher(S.search);
	} catch (e) {
		out.textContent = e.message;
		out.className = 'bad';
		flame.setMatched(null);
		return null;
	}
	out.className = 'muted';
	if (!matcher || !model) {
		out.textContent = '';
		flame.setMatched(null);
		return null;
	}
	const r = search(model, matcher);
	flame.setMatched(r.matched);
	const share = model.numTicks ? r.ticks / model.numTicks : 0;
	out.innerHTML = `${r.functions} function${r.functions === 1 ? '' : 's'} matched · ` +
		`<b id="search-pct">${fmtPct(share)}</b> of the total (${escapeHTML(fmtValue(r.ticks,
		model.unit))})`;
	out.dataset.share = share;
	return r;
}

function topTable(host, top) {
	const box = document.createElement('div');
	box.className = 'table-box';
	box.innerHTML = '<div class="table-tools"><input id="table-filter" type="search" ' +
		'placeholder="Filter functions" spellcheck="false"><span class="muted" id="table-count">' +
		'</span></div><div class="table-scroll"><table id="top-table" class="data"><thead><tr>' +
		'<th data-k="name">Function</th><th data-k="module">Module</th>' +
		'<th data-k="self" class="num">Self</th><th data-k="selfp" class="num">Self %</th>' +
		'<th data-k="total" class="num">Total</th><th data-k="totalp" class="num">Total %</th>' +
		'<th></th></tr></thead><tbody></tbody></table></div>';
	host.append(box);
	const T = top.total || 0;
	if (top.unit === 'samples' || top.unit === 'launches')
		for (const th of box.querySelectorAll('th[data-k="self"], th[data-k="total"]'))
			th.textContent += ` (${top.unit})`;
	const rows = (top.functions || []).map((f) => ({ ...f, module: f.module || '',
		selfp: T ? f.self / T : 0, totalp: T ? f.total / T : 0 }));
	const tbody = box.querySelector('tbody');
	const filter = box.querySelector('#table-filter');
	filter.value = S.filter;
	const fill = () => {
		const k = S.sort, dir = S.dir === 'asc' ? 1 : -1;
		const low = S.filter.toLowerCase();
		const shown = rows.filter((r) => !low || r.name.toLowerCase().includes(low) ||
					  r.module.toLowerCase().includes(low));
		shown.sort((a, b) => {
			const x = a[k], y = b[k];
			return (x < y ? -1 : x > y ? 1 : 0) * dir || (a.name < b.name ? -1 : 1);
		});
		for (const th of box.querySelectorAll('th[data-k]')) {
			th.classList.toggle('sorted', th.dataset.k === k);
			th.dataset.dir = th.dataset.k === k ? S.dir : '';
		}
		const u = top.unit === 'samples' || top.unit === 'launches' ? '' : top.unit;
		tbody.innerHTML = shown.map((r) => `<tr data-name="${escapeHTML(r.name)}">` +
			`<td class="fn" title="${escapeHTML(r.name)}">${escapeHTML(r.name)}</td>` +
			`<td class="mod" title="${escapeHTML(r.module)}">${escapeHTML(r.module)}</td>` +
			`<td class="num">${escapeHTML(fmtValue(r.self, u))}</td>` +
			`<td class="num"><span class="bar" style="--w:${(r.selfp * 100).toFixed(1)}%">` +
			`</span>${fmtPct(r.selfp)}</td>` +
			`<td class="num">${escapeHTML(fmtValue(r.total, u))}</td>` +
			`<td class="num">${fmtPct(r.totalp)}</td>` +
			'<td><button class="small sw" title="Callers and callees">sandwich</button></td>' +
			'</tr>').join('');
		box.querySelector('#table-count').textContent = `${shown.length} of ${rows.length} functions`;
	};
	for (const th of box.querySelectorAll('th[data-k]'))
		th.addEventListener('click', () => {
			const k = th.dataset.k;
			const dir = S.sort === k ? (S.dir === 'asc' ? 'desc' : 'asc')
				: k === 'name' || k === 'module' ? 'asc' : 'desc';
			S.sort = k;
			S.dir = dir;
			writeState(false);
			fill();
		});
	filter.addEventListener('input', () => {
		S.filter = filter.value;
		writeState(false);
		fill();
	});
	tbody.addEventListener('click', (e) => {
		const tr = e.target.closest('tr');
		if (!tr)
			return;
		const name = tr.dataset.name;
		if (e.target.closest('button.sw')) {
			setState({ view: 'sandwich', fn: name });
			return;
		}
		for (const r of tbody.querySelectorAll('tr.selected'))
			r.classList.remove('selected');
		tr.classList.add('selected');
		const input = $('search');
		if (input) {
			input.value = name;
			input.dispatchEvent(new Event('input'));
		}
	});
	tbody.addEventListener('dblclick', (e) => {
		const tr = e.target.closest('tr');
		if (tr)
			setState({ view: 'sandwich', fn: tr.dataset.name });
	});
	fill();
	return box;
}

async function renderProfile(main, gen) {
	const q = { query: S.query, ...range() };
	const bar = toolbar(main, true);
	const tl = document.createElement('div');
	tl.className = 'panel timeline';
	main.prepend(tl);
	const body = document.createElement('div');
	body.className = 'profile-body view-' + S.view;
	main.append(body);
	const unitOf = (t) => t && t.unit;
	const [fbR, topR, tsR] = await Promise.allSettled([
		api('/api/v1/flamegraph', q), api('/api/v1/top', { ...q, limit: 1000 }),
		api('/api/v1/timeseries', { ...q, step: stepFor(S.from, S.until) })]);
	if (!isCurrent(gen))
		return;
	if (tsR.status === 'fulfilled') {
		const chart = timeline(tl, { unit: unitOf(tsR.value),
			onSelect: (a, b) => setState({ from: String(a), until: String(b) }) });
		chart.setData(timelineData(tsR.value));
		hooks.charts.timeline = chart;
	} else {
		showError(tsR.reason);
	}
	let model = null;
	if (fbR.status === 'fulfilled') {
		try {
			model = fromFlamebearer(fbR.value);
		} catch (e) {
			showError(e);
		}
	} else {
		showError(fbR.reason);
	}
	if (model && !model.numTicks) {
		emptyState(body, 'No samples for this selection',
			   `<p>No series matches <code>${escapeHTML(S.query)}</code> with data in this ` +
			   'range. Pick another service or process above, or a longer time range.</p>');
		return;
	}
	const flames = [];
	if (S.view === 'sandwich') {
		renderSandwich(body, bar, model, topR.status === 'fulfilled' ? topR.value : null, flames);
	} else {
		if (S.view !== 'flame') {
			const tbox = document.createElement('div');
			tbox.className = 'panel table-panel';
			body.append(tbox);
			if (topR.status === 'fulfilled')
				topTable(tbox, topR.value);
			else
				showError(topR.reason);
		}
		if (S.view !== 'table' && model) {
			const fbox = document.createElement('div');
			fbox.className = 'panel flame-panel';
			body.append(fbox);
			const flame = newFlame(fbox, 'main');
			hooks.flame = flame;
			flame.setModel(model);
			flames.push(flame);
		}
	}
	if (S.view !== 'table' && S.view !== 'sandwich' && flames[0]) {
		searchBox(bar, () => applySearch(flames[0], model, $('search-share')));
		orientButton(bar, () => flames);
		applySearch(flames[0], model, $('search-share'));
	}
	exportLinks(bar);
	if (model)
		$('total-info').textContent = `${fmtValue(model.numTicks, model.unit)} in range`;
}

function renderSandwich(body, bar, model, top, flames) {
	const fn = S.fn;
	const head = document.createElement('div');
	head.className = 'sandwich-head';
	body.append(head);
	if (!model)
		return;
	if (!fn) {
		emptyState(body, 'Pick a function',
			   '<p>Choose a function in the top-functions table (its <b>sandwich</b> button) ' +
			   'or right-click (or alt-click) it in the flame graph to see its callers and ' +
			   'callees.</p>');
		return;
	}
	const sw = sandwich(model, fn);
	if (!sw) {
		emptyState(body, `No ${fn} in this profile`, '<p>Pick another function or range.</p>');
		return;
	}
	const f = top && top.functions ? top.functions.find((x) => x.name === fn) : null;
	const T = model.numTicks || 1;
	head.innerHTML = `<h2 class="fn-name">${escapeHTML(fn)}</h2><span class="muted">` +
		`total ${escapeHTML(fmtValue(sw.total, model.unit))} (${fmtPct(sw.total / T)})` +
		(f ? ` · self ${escapeHTML(fmtValue(f.self, top.unit))} (${fmtPct(f.self / (top.total || 1))})`
			: '') + '</span>';
	const back = document.createElement('button');
	back.textContent = '← Back to the flame graph';
	back.addEventListener('click', () => setState({ view: 'both', fn: '' }));
	head.append(back);
	const up = document.createElement('div');
	up.className = 'panel';
	up.innerHTML = '<h3>Callers <span class="muted">(who calls it; the function at the bottom)' +
		'</span></h3>';
	const down = document.createElement('div');
	down.className = 'panel';
	down.innerHTML = '<h3>Callees <span class="muted">(what it calls; the function on top)' +
		'</span></h3>';
	body.append(up, down);
	const callers = newFlame(up, 'callers', { orientation: 'flame',
		onSandwich: (name) => setState({ fn: name }) });
	callers.setModel(sw.callers);
	const callees = newFlame(down, 'callees', { orientation: 'icicle',
		onSandwich: (name) => setState({ fn: name }) });
	callees.setModel(sw.callees);
	hooks.flame = callees;
	flames.push(callers, callees);
}

// ---- diff -------------------------------------------------------------------------

async function renderDiff(main, gen) {
	const bar = toolbar(main, false);
	const f = resolveTime(S.from), u = resolveTime(S.until), mid = Math.round((f + u) / 2);
	const L = { from: S.left_from || String(Math.round(f)), until: S.left_until || String(mid) };
	const R = { from: S.right_from || String(mid), until: S.right_until || String(Math.round(u)) };
	const rq = S.right_query || S.query;
	const intro = document.createElement('div');
	intro.className = 'panel diff-ranges';
	intro.innerHTML = '<p class="muted">Drag on each timeline to choose the baseline and the ' +
		'comparison. Red: the comparison spends a larger share there (slower); green: a ' +
		'smaller share (faster).</p>' +
		'<form id="right-query-form" class="inline"><label>Comparison selector ' +
		'<input id="right-query" spellcheck="false" placeholder="same as the baseline"></label>' +
		'<button>Apply</button></form><div class="tl-left"><b class="swatch base">Baseline</b> ' +
		`<span id="left-range">${fmtDate(+L.from)} → ${fmtDate(+L.until)}</span></div>` +
		'<div class="tl-right"><b class="swatch comp">Comparison</b> ' +
		`<span id="right-range">${fmtDate(+R.from)} → ${fmtDate(+R.until)}</span></div>`;
	main.prepend(intro);
	intro.querySelector('#right-query').value = S.right_query;
	intro.querySelector('#right-query-form').addEventListener('submit', (e) => {
		e.preventDefault();
		setState({ right_query: intro.querySelector('#right-query').value.trim() });
	});
	const body = document.createElement('div');
	main.append(body);
	const [lts, rts, diff] = await Promise.allSettled([
		api('/api/v1/timeseries', { query: S.query, ...range(), step: stepFor(S.from, S.until) }),
		api('/api/v1/timeseries', { query: rq, ...range(), step: stepFor(S.from, S.until) }),
		api('/api/v1/diff', { query: S.query, from: L.from, until: L.until, right_query:
				      S.right_query, right_from: R.from, right_until: R.until })]);
	if (!isCurrent(gen))
		return;
	const sides = [[lts, intro.querySelector('.tl-left'), L, 'left', 'rgba(59,111,216,0.22)'],
		       [rts, intro.querySelector('.tl-right'), R, 'right', 'rgba(224,105,45,0.25)']];
	for (const [r, host, sel, side, color] of sides) {
		if (r.status !== 'fulfilled') {
			showError(r.reason);
			continue;
		}
		const c = timeline(host, { unit: r.value.unit, height: 90,
			onSelect: (a, b) => setState({ [side + '_from']: String(a),
						       [side + '_until']: String(b) }) });
		c.setData(timelineData(r.value));
		c.setSelections([{ ...sel, from: +sel.from, until: +sel.until, color }]);
		hooks.charts[side] = c;
	}
	if (diff.status !== 'fulfilled') {
		showError(diff.reason);
		return;
	}
	let model;
	try {
		model = fromFlamebearer(diff.value);
	} catch (e) {
		showError(e);
		return;
	}
	if (!model.numTicks) {
		emptyState(body, 'Nothing to compare',
			   '<p>Neither range has samples for this selection. Drag on the timelines to ' +
			   'pick ranges with data, or choose another service above.</p>');
		return;
	}
	const D = model.diff;
	const sum = document.createElement('div');
	sum.className = 'diff-summary';
	body.append(sum);
	const fbox = document.createElement('div');
	fbox.className = 'panel flame-panel';
	body.append(fbox);
	const flame = newFlame(fbox, 'diff', { onSandwich: null });
	flame.setModel(model);
	hooks.flame = flame;
	const pp = (flame.maxDelta * 100).toFixed(1);
	const grad = [...DIFF_GREEN].reverse().concat(DIFF_RED.slice(1)).join(',');
	sum.innerHTML = `<span>Baseline: <b>${escapeHTML(fmtValue(D.leftTicks, model.unit))}</b></span>` +
		`<span>Comparison: <b>${escapeHTML(fmtValue(D.rightTicks, model.unit))}</b></span>` +
		`<span class="legend-scale"><span>−${pp} pp (faster)</span><i style="background:` +
		`linear-gradient(to right, ${grad})"></i><span>+${pp} pp (slower)</span></span>`;
	searchBox(bar, () => applySearch(flame, model, $('search-share')));
	orientButton(bar, () => [flame]);
	applySearch(flame, model, $('search-share'));
}

// ---- the page -------------------------------------------------------------------------

async function render() {
	const gen = newGeneration();
	hooks.renders++;
	hooks.flame = null;
	hooks.flames = {};
	hooks.charts = {};
	clearErrors();
	renderHeader();
	const main = $('main');
	main.textContent = '';
	$('total-info').textContent = '';
	document.body.dataset.view = S.view;
	const done = track(Promise.resolve().then(async () => {
		if (S.view === 'gpu')
			return renderGpu(main, gen);
		if (S.view === 'alerts')
			return renderAlerts(main, gen);
		let has;
		try {
			has = await loadPickers(gen);
		} catch (e) {
			showError(e);
			return;
		}
		if (!isCurrent(gen))
			return;
		renderHeader();
		if (!has) {
			emptyState(main, 'No profiles yet', NO_PROFILES);
			return;
		}
		if (S.view === 'diff')
			return renderDiff(main, gen);
		return renderProfile(main, gen);
	}).catch(showError));
	await done;
	if (isCurrent(gen))
		document.body.dataset.rendered = String(hooks.renders);
}

setRenderer(render);
setupHeader();
render();
