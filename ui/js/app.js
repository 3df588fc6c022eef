// app.js: the Sonde web UI, a single page over the server's API (docs/api.md).
// Views: the profile (timeline, flame graph, top functions, sandwich), the
// diff of two ranges, the GPU page (memory, launches, waits, NCCL) and the
// alerts. Everything a view shows is in the URL (query, from, until, view,
// ...), so a reload or a shared link shows the same thing. Loaded by
// index.html.

import { apiURL, authToken, download } from './api.js';
import { FlameGraph, DIFF_RED, DIFF_GREEN } from './flamegraph.js';
import { fromFlamebearer, nameMatcher, search, sandwich, focus, hide, collapse } from './model.js';
import { fmtValue, fmtPct, fmtDate, resolveTime, escapeHTML } from './format.js';
import { DEFAULTS, PROFILE_VIEWS, PICKS, OPTIONAL_PICKS, RANGES, $, S, hooks, cleanups, setRenderer, newGeneration,
	 isCurrent, stateURL, writeState, setState, api, track, showError, clearErrors, emptyState,
	 NO_PROFILES, parseMatchers, formatMatchers, pickOf, withPick, range, stepFor, timeline,
	 timelineData, toolbar } from './page.js';
import { renderGpu } from './gpu.js';
import { renderAlerts } from './alerts.js';

// ---- the range fitted to the data ---------------------------------------------------

// On a page opened without a range, a store younger than the default hour
// gets a range from just before its first window, and one with nothing in
// the last hour the last hour it has data for -- instead of the data
// squeezed into a corner of every chart. Written into the URL in place, so
// a reload shows the same. Once per page load.
let fitted = false;
const DATA_HORIZON = 'now-30d';

async function fitRange(gen) {
	const p = new URLSearchParams(location.search);
	if (fitted || p.has('from') || p.has('until'))
		return;
	fitted = true;
	const t = await api('/api/v1/totals', { by: 'type', from: DATA_HORIZON, until: 'now' });
	if (!isCurrent(gen) || t.from_ms === null || t.from_ms === undefined)
		return;
	const now = Date.now(), def = resolveTime(DEFAULTS.from, now);
	const padOf = (span) => Math.max(5000, span * 0.05);
	if (t.until_ms < def) {
		const a = Math.max(t.from_ms, t.until_ms - 3600e3);
		const pad = padOf(t.until_ms - a);
		S.from = String(Math.round(a - pad));
		S.until = String(Math.round(Math.min(now, t.until_ms + pad)));
	} else if (t.from_ms > def) {
		S.from = String(Math.round(t.from_ms - padOf(now - t.from_ms)));
	} else {
		return;
	}
	writeState(false);
}

// ---- the selector ---------------------------------------------------------------------

// Whether the selector is one the server takes: an empty one is; a bad one
// is said once, in one banner, and nothing is drawn from it.
let goodQuery = '';

async function checkSelector(gen) {
	if (!S.query.trim())
		return true;
	try {
		await api('/api/v1/labels', { query: S.query, ...range() });
	} catch (e) {
		if (e.status !== 400)
			throw e;
		if (isCurrent(gen)) {
			const msg = e.message.replace(/^\/api\/v1\/labels: /, '');
			showError(`The selector ${S.query} is not valid: ${msg}`);
		}
		return false;
	}
	goodQuery = S.query;
	return true;
}

const DATALIST_MAX = 500;

function fillDatalist(id, values) {
	$(id).innerHTML = values.slice(0, DATALIST_MAX)
		.map((v) => `<option value="${escapeHTML(v)}"></option>`).join('');
}

// Fills the pickers from the label values in range (each narrowed by the
// ones before it). A page opened with no selector gets the profile type
// cpu (else the first) and the busiest service of that type (a Python job
// is its script: the agent names it so). Job, rank and pod show only where
// the selection's samples have them. Resolves to false when there are no profiles
// at all.
async function loadPickers(gen, valid) {
	const r = range();
	const vals = async (name, ms) => (await api('/api/v1/label/values', {
		name, query: ms.length ? formatMatchers(ms) : '', ...r,
	})).values || [];
	const types = await vals('type', []);
	if (!isCurrent(gen))
		return false;
	if (!types.length) {
		$('pick-type').innerHTML = '<option value="">(none)</option>';
		for (const [label, id] of PICKS)
			if (label !== 'type') {
				$(id).value = '';
				fillDatalist('dl-' + id.slice(5), []);
				if (OPTIONAL_PICKS.has(label))
					$(id).closest('label').hidden = true;
			}
		return false;
	}
	// Defaults only for an empty selector: a typed one is the user's, as
	// typed. A bad one shows what can be read of it.
	let q = valid ? S.query : S.query || goodQuery;
	if (valid && !q.trim()) {
		const type = types.includes('cpu') ? 'cpu' : types[0];
		q = withPick(q, 'type', type);
		const tot = await api('/api/v1/totals', { by: 'service_name', query: q, ...r });
		if (!isCurrent(gen))
			return false;
		const busiest = (tot.groups || []).find((g) => g.value);
		if (busiest)
			q = withPick(q, 'service_name', busiest.value);
	}
	const ms = [];
	for (const [label, id] of PICKS) {
		const values = label === 'type' ? types : await vals(label, ms);
		if (!isCurrent(gen))
			return false;
		let cur = parseMatchers(q).find(([k, op]) => k === label && op === '=');
		cur = cur ? cur[2] : '';
		const el = $(id);
		if (label === 'type') {
			const opts = cur ? [] : [['', '(any)']];
			for (const v of values)
				opts.push([v, v]);
			if (cur && !values.includes(cur))
				opts.push([cur, cur + ' (no data)']);
			el.innerHTML = opts.map(([v, t]) => `<option value="${escapeHTML(v)}">` +
						`${escapeHTML(t)}</option>`).join('');
		} else {
			fillDatalist('dl-' + id.slice(5), values);
			el.title = `${values.length} value${values.length === 1 ? '' : 's'} in range` +
				(cur && !values.includes(cur) ? `; ${cur} has no data` : '');
			el.classList.toggle('nodata', !!cur && !values.includes(cur));
			if (OPTIONAL_PICKS.has(label))
				el.closest('label').hidden = !values.length && !cur;
		}
		el.value = cur;
		if (cur)
			ms.push([label, '=', cur]);
	}
	if (valid && q !== S.query) {
		S.query = q;
		goodQuery = q;
		writeState(false);
	}
	$('query').value = S.query;
	renderFilters();
	return true;
}

// The selector's matchers that no picker shows, as chips with a remove
// button.
function renderFilters() {
	const picked = new Set(PICKS.map(([l]) => l));
	const rest = parseMatchers(S.query).filter(([k, op]) => !(picked.has(k) && op === '='));
	const box = $('filters');
	box.innerHTML = rest.map(([k, op, v], i) => `<span class="chip filter" data-i="${i}">` +
		`${escapeHTML(k)}${escapeHTML(op)}"${escapeHTML(v)}"<button type="button" class="small" ` +
		`aria-label="Remove the filter ${escapeHTML(k)}${escapeHTML(op)}${escapeHTML(v)}">×</button>` +
		'</span>').join('');
	box.onclick = (e) => {
		const chip = e.target.closest('button') && e.target.closest('.chip');
		if (!chip)
			return;
		const drop = rest[+chip.dataset.i];
		const ms = parseMatchers(S.query).filter((m) => !(m[0] === drop[0] && m[1] === drop[1] &&
								 m[2] === drop[2]));
		setState({ query: formatMatchers(ms) });
	};
}

// ---- header -------------------------------------------------------------------------

const REFRESH_MS = { '10s': 10e3, '30s': 30e3, '1m': 60e3, '5m': 300e3 };
let refreshTimer = null;

// Loads the view again every S.refresh while the page is visible: only a
// range that ends now moves.
function scheduleRefresh() {
	clearTimeout(refreshTimer);
	refreshTimer = null;
	const ms = REFRESH_MS[S.refresh];
	if (!ms)
		return;
	refreshTimer = setTimeout(() => {
		if (document.visibilityState === 'visible' && !document.querySelector('.tooltip:not([hidden])'))
			render();
		else
			scheduleRefresh();
	}, ms);
}

const isAbs = (t) => /^\d+$/.test(String(t));

function renderHeader() {
	for (const a of document.querySelectorAll('#nav a')) {
		const v = a.dataset.view;
		const active = v === 'both' ? PROFILE_VIEWS.includes(S.view) : S.view === v;
		a.classList.toggle('active', active);
		if (active)
			a.setAttribute('aria-current', 'page');
		else
			a.removeAttribute('aria-current');
		a.href = stateURL({ view: v });
	}
	const preset = $('range-preset');
	const known = RANGES.some(([v]) => v === S.from) && S.until === 'now';
	const since = !known && isAbs(S.from) && S.until === 'now';
	preset.innerHTML = RANGES.map(([v, t]) => `<option value="${v}">${t}</option>`).join('') +
		(known ? '' : since ? '<option value="custom">Since the data began</option>'
			: '<option value="custom">Absolute range</option>');
	preset.value = known ? S.from : 'custom';
	const f = resolveTime(S.from), u = resolveTime(S.until);
	$('range-label').textContent = Number.isFinite(f) && Number.isFinite(u)
		? `${fmtDate(f)} → ${S.until === 'now' ? 'now' : fmtDate(u)}` : `${S.from} → ${S.until}`;
	// The alerts are what fired, whatever the range: no range there.
	$('range-box').classList.toggle('no-range', S.view === 'alerts');
	$('query-form').hidden = S.view === 'gpu' || S.view === 'alerts';
	$('query').value = S.query;
	$('auto-refresh').value = S.refresh in REFRESH_MS ? S.refresh : '';
}

// A datetime-local input's value for ms, in local time.
function localInput(ms) {
	const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60e3);
	return d.toISOString().slice(0, 19);
}

function setupAbsolute() {
	const form = $('abs-form'), btn = $('range-abs');
	const show = (on) => {
		form.hidden = !on;
		btn.setAttribute('aria-expanded', String(on));
		if (on) {
			$('abs-from').value = localInput(resolveTime(S.from));
			$('abs-until').value = localInput(resolveTime(S.until));
			$('abs-from').focus();
		}
	};
	btn.addEventListener('click', () => show(form.hidden));
	$('abs-cancel').addEventListener('click', () => show(false));
	form.addEventListener('submit', (e) => {
		e.preventDefault();
		const a = new Date($('abs-from').value).getTime(), b = new Date($('abs-until').value).getTime();
		if (!(a < b)) {
			showError('the absolute range needs a start before its end');
			return;
		}
		show(false);
		setState({ from: String(a), until: String(b), left_from: '', left_until: '',
			   right_from: '', right_until: '' });
	});
}

// ---- theme --------------------------------------------------------------------------

// Light or dark: the system's (prefers-color-scheme) until the user picks
// one with the toggle, kept in this browser. Views drawn on canvas redraw
// on the 'sonde-theme' event.
const THEME_KEY = 'sonde-theme';

function applyTheme() {
	let t = null;
	try {
		t = localStorage.getItem(THEME_KEY);
	} catch (e) {
		t = null;
	}
	const dark = t ? t === 'dark' : matchMedia('(prefers-color-scheme: dark)').matches;
	document.documentElement.dataset.theme = dark ? 'dark' : 'light';
	$('theme').textContent = dark ? '☀' : '☾';
	$('theme').title = dark ? 'Switch to the light theme' : 'Switch to the dark theme';
	$('theme').setAttribute('aria-label', $('theme').title);
	window.dispatchEvent(new Event('sonde-theme'));
}

function setupTheme() {
	$('theme').addEventListener('click', () => {
		const dark = document.documentElement.dataset.theme === 'dark';
		try {
			localStorage.setItem(THEME_KEY, dark ? 'light' : 'dark');
		} catch (e) {
			// no storage: the toggle lasts this page
			document.documentElement.dataset.theme = dark ? 'light' : 'dark';
			window.dispatchEvent(new Event('sonde-theme'));
			return;
		}
		applyTheme();
	});
	matchMedia('(prefers-color-scheme: dark)').addEventListener('change', applyTheme);
	applyTheme();
}

function setupFilters() {
	const box = $('filter-new');
	$('add-filter').addEventListener('click', async () => {
		box.hidden = !box.hidden;
		if (box.hidden)
			return;
		$('filter-name').focus();
		try {
			const r = await api('/api/v1/labels', { query: goodQuery, ...range() });
			fillDatalist('dl-names', r.names || []);
		} catch (e) {
			showError(e);
		}
	});
	$('filter-name').addEventListener('change', async () => {
		const name = $('filter-name').value.trim();
		if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name))
			return;
		try {
			const r = await api('/api/v1/label/values', { name, query: goodQuery, ...range() });
			fillDatalist('dl-values', r.values || []);
		} catch (e) {
			showError(e);
		}
	});
	const add = () => {
		const name = $('filter-name').value.trim(), value = $('filter-value').value;
		if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) {
			showError(`a label name is letters, digits and _ (not "${name}")`);
			return;
		}
		const ms = parseMatchers(S.query);
		ms.push([name, $('filter-op').value, value]);
		box.hidden = true;
		$('filter-name').value = $('filter-value').value = '';
		setState({ query: formatMatchers(ms) });
	};
	$('filter-add').addEventListener('click', add);
	for (const id of ['filter-name', 'filter-value'])
		$(id).addEventListener('keydown', (e) => {
			if (e.key === 'Enter') {
				e.preventDefault();
				add();
			}
		});
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
	$('auto-refresh').addEventListener('change', (e) => setState({ refresh: e.target.value }, false));
	for (const [label, id] of PICKS) {
		const pick = (e) => {
			const v = e.target.value.trim();
			if (v === pickOf(label))
				return;
			let q = withPick(S.query, label, v);
			// A new job, service or process makes the narrower picks
			// stale; a new profile type keeps them.
			if (label === 'job' || label === 'service_name' || label === 'comm')
				for (const [l] of PICKS.slice(PICKS.findIndex(([x]) => x === label) + 1))
					q = withPick(q, l, '');
			setState({ query: q, fn: '', zoom: '' });
		};
		$(id).addEventListener('change', pick);
		// Enter picks (and does not submit the form's selector).
		$(id).addEventListener('keydown', (e) => {
			if (e.key === 'Enter') {
				e.preventDefault();
				pick(e);
			}
		});
	}
	$('query-form').addEventListener('submit', (e) => {
		e.preventDefault();
		setState({ query: $('query').value.trim(), zoom: '' });
	});
	setupAbsolute();
	setupFilters();
	setupTheme();
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
	// With a token (sonde server --auth) a download must send it: fetched.
	for (const id of ['export-pprof', 'export-speedscope'])
		el.querySelector('#' + id).addEventListener('click', (e) => {
			if (!authToken())
				return;
			e.preventDefault();
			const a = e.currentTarget;
			download(a.href, a.getAttribute('download')).catch((err) => showError(err.message));
		});
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
		'aria-label="Search functions" spellcheck="false"><span id="search-share" class="muted" ' +
		'aria-live="polite"></span>';
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

// ---- focus, hide, collapse, colours, grouping --------------------------------------

const listOf = (v) => (v ? v.split(';').filter(Boolean) : []);

// The profile as the flame graph shows it: focused on a function (S.focus),
// without the hidden ones (S.hide), with some collapsed (S.collapse), in
// that order. The top table is the server's, of the whole selection.
function transformed(model) {
	let m = model;
	if (S.focus) {
		const f = focus(m, S.focus);
		if (f)
			m = f;
		else
			showError(`no ${S.focus} in this profile to focus on`);
	}
	const hidden = listOf(S.hide);
	if (hidden.length)
		m = hide(m, hidden);
	for (const n of listOf(S.collapse))
		m = collapse(m, n);
	return m;
}

const GROUPS = [['', 'Not grouped'], ['comm', 'By process'], ['thread', 'By thread'],
	['pid', 'By pid'], ['service_name', 'By service'], ['node', 'By node']];

// The toolbar's undo chips for focus, hide and collapse, the colour toggle
// and the grouping.
function flameControls(bar, flame, model) {
	const box = document.createElement('span');
	box.className = 'flame-controls';
	const chips = [];
	if (S.focus)
		chips.push(['focus', `Focused on ${S.focus}`, { focus: '' }]);
	for (const n of listOf(S.hide))
		chips.push(['hide', `Hidden: ${n}`, { hide: listOf(S.hide).filter((x) => x !== n).join(';') }]);
	for (const n of listOf(S.collapse))
		chips.push(['collapse', `Collapsed: ${n}`,
			    { collapse: listOf(S.collapse).filter((x) => x !== n).join(';') }]);
	box.innerHTML = chips.map(([k, t], i) => `<span class="chip undo" data-kind="${k}" data-i="${i}">` +
		`${escapeHTML(t)}<button type="button" class="small" aria-label="Undo: ${escapeHTML(t)}">` +
		'×</button></span>').join('') +
		'<select id="group-by" aria-label="Group the stacks by a label">' +
		GROUPS.map(([v, t]) => `<option value="${v}">${t}</option>`).join('') + '</select>' +
		'<button type="button" id="color-by" aria-pressed="false"></button>' +
		// The Python view's switch, where it changes what is drawn.
		(model && (model.folded || S.frames === 'all')
			? '<button type="button" id="frames-toggle" aria-pressed="' +
			  String(S.frames !== 'all') + '" title="Python view: Python\'s frames and the ' +
			  'native code they call, the interpreter\'s own folded into their callers">' +
			  (S.frames === 'all' ? 'Frames: all' : 'Frames: Python') + '</button>'
			: '');
	box.addEventListener('click', (e) => {
		const chip = e.target.closest('button') && e.target.closest('.chip');
		if (chip)
			setState({ ...chips[+chip.dataset.i][2], zoom: '' });
	});
	const frames = box.querySelector('#frames-toggle');
	if (frames)
		frames.addEventListener('click', () => setState({ frames: S.frames === 'all' ? '' : 'all',
								  zoom: '', focus: '' }));
	const group = box.querySelector('#group-by');
	if (S.group && !GROUPS.some(([v]) => v === S.group))
		group.insertAdjacentHTML('beforeend', `<option value="${escapeHTML(S.group)}">By ` +
					 `${escapeHTML(S.group)}</option>`);
	group.value = S.group;
	group.addEventListener('change', () => setState({ group: group.value, zoom: '' }));
	const color = box.querySelector('#color-by');
	const label = () => {
		const mod = S.color === 'module';
		color.textContent = mod ? 'Colour: by module' : 'Colour: by name';
		color.title = mod ? 'Colour frames by the name of their function\'s package'
			: 'Colour frames by their module (binary, library or Python file)';
		color.setAttribute('aria-pressed', String(mod));
	};
	label();
	color.addEventListener('click', () => {
		S.color = S.color === 'module' ? '' : 'module';
		writeState(false);
		flame.setColorBy(S.color === 'module' ? 'module' : 'package');
		label();
	});
	bar.append(box);
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
	if (!out)
		return null;
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

// The top table's rows: one more is asked for, to tell a capped list.
const TOP_ROWS = 1000;

function topTable(host, top) {
	const box = document.createElement('div');
	box.className = 'table-box';
	box.innerHTML = '<div class="table-tools"><input id="table-filter" type="search" ' +
		'placeholder="Filter functions" aria-label="Filter functions" spellcheck="false">' +
		'<span class="muted" id="table-count">' +
		'</span></div><div class="table-scroll"><table id="top-table" class="data fixed">' +
		'<colgroup><col><col class="c-mod"><col class="c-val"><col class="c-pct">' +
		'<col class="c-val"><col class="c-pct2"><col class="c-btn"></colgroup><thead><tr>' +
		'<th data-k="name" scope="col">Function</th><th data-k="module" scope="col">Module</th>' +
		'<th data-k="self" class="num" scope="col" title="Time in the function itself">Self</th>' +
		'<th data-k="selfp" class="num" scope="col">Self %</th>' +
		'<th data-k="total" class="num" scope="col" title="Time in the function and what it ' +
		'calls">Total</th><th data-k="totalp" class="num" scope="col">Total %</th>' +
		'<th scope="col"><span class="sr-only">Sandwich</span></th></tr></thead><tbody></tbody>' +
		'</table></div>';
	host.append(box);
	const T = top.total || 0;
	if (top.unit === 'samples' || top.unit === 'launches')
		for (const th of box.querySelectorAll('th[data-k="self"], th[data-k="total"]'))
			th.title += ` (${top.unit})`;
	const capped = (top.functions || []).length > TOP_ROWS;
	const rows = (top.functions || []).slice(0, TOP_ROWS).map((f) => ({ ...f, module: f.module || '',
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
			`<td class="fn" title="${escapeHTML(r.name + (r.file ? '\n' + r.file +
				(r.line ? ':' + r.line : '') : ''))}">${escapeHTML(r.name)}` +
			(r.file ? `<span class="src">${escapeHTML(r.file.split('/').pop())}` +
				`${r.line ? ':' + r.line : ''}</span>` : '') + '</td>' +
			`<td class="mod" title="${escapeHTML(r.module)}">${escapeHTML(r.module)}</td>` +
			`<td class="num">${escapeHTML(fmtValue(r.self, u))}</td>` +
			`<td class="num"><span class="bar" style="--w:${(r.selfp * 100).toFixed(1)}%">` +
			`</span>${fmtPct(r.selfp)}</td>` +
			`<td class="num">${escapeHTML(fmtValue(r.total, u))}</td>` +
			`<td class="num">${fmtPct(r.totalp)}</td>` +
			'<td><button class="small sw" title="Callers and callees (sandwich)" ' +
			`aria-label="Sandwich view of ${escapeHTML(r.name)}">⇅</button></td>` +
			'</tr>').join('');
		box.querySelector('#table-count').textContent = capped
			? `${shown.length} of the top ${rows.length} functions (more are not listed)`
			: `${shown.length} of ${rows.length} functions`;
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

// The handle between the top table and the flame graph: dragging it (or
// the arrow keys on it) sets the table's share of the width, kept in the
// URL (split).
const SPLIT_DEFAULT = 45, SPLIT_MIN = 20, SPLIT_MAX = 80;

function splitOf() {
	const v = +S.split;
	return v >= SPLIT_MIN && v <= SPLIT_MAX ? v : SPLIT_DEFAULT;
}

function splitter(body) {
	const h = document.createElement('div');
	h.className = 'splitter';
	h.tabIndex = 0;
	h.setAttribute('role', 'separator');
	h.setAttribute('aria-orientation', 'vertical');
	h.setAttribute('aria-label', 'Resize the table and the flame graph');
	h.setAttribute('aria-valuemin', String(SPLIT_MIN));
	h.setAttribute('aria-valuemax', String(SPLIT_MAX));
	body.append(h);
	const set = (v, save) => {
		v = Math.round(Math.min(SPLIT_MAX, Math.max(SPLIT_MIN, v)));
		body.style.setProperty('--split', v + '%');
		h.setAttribute('aria-valuenow', String(v));
		if (save) {
			S.split = v === SPLIT_DEFAULT ? '' : String(v);
			writeState(false);
			for (const f of Object.values(hooks.flames))
				f.resize?.();
			window.dispatchEvent(new Event('resize'));
		}
	};
	set(splitOf(), false);
	h.addEventListener('pointerdown', (e) => {
		e.preventDefault();
		h.setPointerCapture(e.pointerId);
		const box = body.getBoundingClientRect();
		const move = (ev) => set((ev.clientX - box.left) / box.width * 100, false);
		const up = (ev) => {
			h.removeEventListener('pointermove', move);
			h.removeEventListener('pointerup', up);
			set((ev.clientX - box.left) / box.width * 100, true);
		};
		h.addEventListener('pointermove', move);
		h.addEventListener('pointerup', up);
	});
	h.addEventListener('keydown', (e) => {
		const d = e.key === 'ArrowLeft' ? -5 : e.key === 'ArrowRight' ? 5 : 0;
		if (d) {
			e.preventDefault();
			set(splitOf() + d, true);
		}
	});
}

// The frames argument of the profile queries: the Python view unless the
// user asked for every frame.
const framesArg = () => (S.frames === 'all' ? 'all' : 'python');

async function renderProfile(main, gen) {
	const q = { query: S.query, ...range(), frames: framesArg() };
	const bar = toolbar(main, true);
	const tl = document.createElement('div');
	tl.className = 'panel timeline';
	main.prepend(tl);
	const body = document.createElement('div');
	body.className = 'profile-body view-' + S.view;
	main.append(body);
	const unitOf = (t) => t && t.unit;
	const [fbR, topR, tsR] = await Promise.allSettled([
		api('/api/v1/flamegraph', S.group ? { ...q, group_by: S.group } : q),
		api('/api/v1/top', { ...q, limit: TOP_ROWS + 1 }),
		api('/api/v1/timeseries', { query: S.query, ...range(), step: stepFor(S.from, S.until) })]);
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
		if (S.view === 'both' && model)
			splitter(body);
		if (S.view !== 'table' && model) {
			const fbox = document.createElement('div');
			fbox.className = 'panel flame-panel';
			body.append(fbox);
			const shown = transformed(model);
			const flame = newFlame(fbox, 'main', {
				colorBy: S.color === 'module' ? 'module' : 'package',
				onFocus: (n) => setState({ focus: n, zoom: '' }),
				onHide: (n) => setState({ hide: [...listOf(S.hide), n].join(';'), zoom: '' }),
				onCollapse: (n) => setState({ collapse: [...listOf(S.collapse), n].join(';'),
							     zoom: '' }),
				onZoom: (p) => {
					S.zoom = p ? p.join(';') : '';
					writeState(false);
				},
			});
			hooks.flame = flame;
			flame.setModel(shown);
			if (S.zoom && !flame.zoomTo(S.zoom.split(';'), false)) {
				S.zoom = '';
				writeState(false);
			}
			flames.push(flame);
			model = shown;
		}
	}
	if (S.view !== 'table' && S.view !== 'sandwich' && flames[0]) {
		searchBox(bar, () => applySearch(flames[0], model, $('search-share')));
		orientButton(bar, () => flames);
		flameControls(bar, flames[0], model);
		applySearch(flames[0], model, $('search-share'));
	}
	if (model)
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

// The default baseline and comparison: two adjacent windows that hold data
// -- the data of the range, split in half -- or, comparing two selectors,
// the same window for both. Null when the range has no data.
async function diffDefaults() {
	const t = await api('/api/v1/totals', { by: 'type', query: S.query, ...range() });
	if (t.from_ms === null || t.from_ms === undefined)
		return null;
	const a = Math.max(resolveTime(S.from), t.from_ms);
	const b = Math.min(resolveTime(S.until), t.until_ms);
	if (S.right_query && S.right_query !== S.query)
		return { L: { from: String(a), until: String(b) }, R: { from: String(a), until: String(b) } };
	const mid = Math.round((a + b) / 2);
	return { L: { from: String(a), until: String(mid) }, R: { from: String(mid), until: String(b) } };
}

// Per function: its share of each side's total (a function counted once
// per stack however deep it recurses), and the change in points.
export function diffRows(model) {
	const D = model.diff, by = new Map();
	for (let i = 1; i < model.n; i++) {
		const nm = model.name[i];
		let p = model.parent[i], inner = false;
		for (; p > 0; p = model.parent[p])
			if (model.name[p] === nm) {
				inner = true;
				break;
			}
		if (inner)
			continue;
		const r = by.get(nm) || { l: 0, r: 0 };
		r.l += D.lTotal[i];
		r.r += D.rTotal[i];
		by.set(nm, r);
	}
	const rows = [];
	for (const [nm, v] of by) {
		const l = D.leftTicks ? v.l / D.leftTicks : 0, r = D.rightTicks ? v.r / D.rightTicks : 0;
		rows.push({ name: model.names[nm], l, r, d: r - l });
	}
	rows.sort((x, y) => Math.abs(y.d) - Math.abs(x.d) || (x.name < y.name ? -1 : 1));
	return rows;
}

const DIFF_ROWS = 200;

function diffTable(host, model) {
	const rows = diffRows(model);
	const box = document.createElement('div');
	box.className = 'panel';
	box.innerHTML = '<h3>Largest changes <span class="muted">(share of each side\'s total, ' +
		'in percentage points)</span></h3><div class="table-scroll"><table id="diff-table" ' +
		'class="data fixed"><colgroup><col><col class="c-wide"><col class="c-wide">' +
		'<col class="c-wide"></colgroup><thead><tr><th scope="col">Function</th>' +
		'<th scope="col" class="num">Baseline</th><th scope="col" class="num">Comparison</th>' +
		'<th scope="col" class="num">Change</th></tr></thead><tbody>' +
		rows.slice(0, DIFF_ROWS).map((r) => `<tr data-name="${escapeHTML(r.name)}">` +
			`<td class="fn" title="${escapeHTML(r.name)}">${escapeHTML(r.name)}</td>` +
			`<td class="num">${fmtPct(r.l)}</td><td class="num">${fmtPct(r.r)}</td>` +
			`<td class="num ${r.d > 0 ? 'worse' : r.d < 0 ? 'better' : ''}">` +
			`${r.d > 0 ? '+' : r.d < 0 ? '−' : ''}${Math.abs(r.d * 100).toFixed(2)} pp</td></tr>`)
			.join('') + '</tbody></table></div>' +
		(rows.length > DIFF_ROWS ? `<p class="muted">The ${DIFF_ROWS} largest of ${rows.length} ` +
			'functions.</p>' : '');
	host.append(box);
	box.querySelector('tbody').addEventListener('click', (e) => {
		const tr = e.target.closest('tr');
		const input = $('search');
		if (tr && input) {
			input.value = tr.dataset.name;
			input.dispatchEvent(new Event('input'));
		}
	});
}

const SCALE_DEFAULT = 10;

function scaleOf() {
	const v = +S.scale;
	return v > 0 && v <= 100 ? v : SCALE_DEFAULT;
}

async function renderDiff(main, gen) {
	const bar = toolbar(main, false);
	let L = { from: S.left_from, until: S.left_until }, R = { from: S.right_from, until: S.right_until };
	if (!L.from || !L.until || !R.from || !R.until) {
		const d = await diffDefaults();
		if (!isCurrent(gen))
			return;
		if (!d) {
			emptyState(main, 'Nothing to compare',
				   '<p>This range has no samples for this selection. Pick a longer time range ' +
				   'above, or another service.</p>');
			return;
		}
		L = { from: L.from && L.until ? L.from : d.L.from, until: L.from && L.until ? L.until : d.L.until };
		R = { from: R.from && R.until ? R.from : d.R.from, until: R.from && R.until ? R.until : d.R.until };
	}
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
				      S.right_query, right_from: R.from, right_until: R.until,
				      frames: framesArg() })]);
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
	for (const [ticks, what] of [[D.leftTicks, 'baseline'], [D.rightTicks, 'comparison']])
		if (!ticks) {
			const w = document.createElement('div');
			w.className = 'warning';
			w.id = 'diff-warning';
			w.textContent = `The ${what} has no samples for this selection, so every function ` +
				`shows as ${what === 'baseline' ? 'new (red)' : 'gone (green)'}: drag on its ` +
				'timeline to pick a range with data.';
			body.append(w);
		}
	const sum = document.createElement('div');
	sum.className = 'diff-summary';
	body.append(sum);
	const fbox = document.createElement('div');
	fbox.className = 'panel flame-panel';
	body.append(fbox);
	const flame = newFlame(fbox, 'diff', { onSandwich: null, diffScale: scaleOf() / 100 });
	flame.setModel(model);
	hooks.flame = flame;
	const grad = [...DIFF_GREEN].reverse().concat(DIFF_RED.slice(1)).join(',');
	sum.innerHTML = `<span>Baseline: <b>${escapeHTML(fmtValue(D.leftTicks, model.unit))}</b></span>` +
		`<span>Comparison: <b>${escapeHTML(fmtValue(D.rightTicks, model.unit))}</b></span>` +
		'<span class="legend-scale"><span>−<span class="pp"></span> pp (faster)</span><i style="' +
		`background: linear-gradient(to right, ${grad})"></i><span>+<span class="pp"></span> pp ` +
		'(slower)</span></span><label class="muted">Colour scale ± <input id="diff-scale" ' +
		'type="number" min="0.5" max="100" step="0.5"> pp</label>' +
		'<span class="muted" id="diff-max"></span>';
	const setScale = (v) => {
		for (const el of sum.querySelectorAll('.pp'))
			el.textContent = String(v);
		sum.querySelector('#diff-scale').value = String(v);
		sum.querySelector('#diff-max').textContent =
			`largest change ${(flame.maxDelta * 100).toFixed(1)} pp` +
			(flame.maxDelta * 100 > v ? ' (beyond the scale: drawn at its end)' : '');
	};
	setScale(scaleOf());
	sum.querySelector('#diff-scale').addEventListener('change', (e) => {
		const v = +e.target.value;
		if (!(v > 0 && v <= 100))
			return;
		S.scale = v === SCALE_DEFAULT ? '' : String(v);
		writeState(false);
		flame.opts.diffScale = v / 100;
		flame.prepareColors();
		flame.schedule();
		setScale(v);
	});
	searchBox(bar, () => applySearch(flame, model, $('search-share')));
	orientButton(bar, () => [flame]);
	applySearch(flame, model, $('search-share'));
	diffTable(body, model);
}

// ---- the page -------------------------------------------------------------------------

async function render() {
	const gen = newGeneration();
	hooks.renders++;
	hooks.flame = null;
	hooks.flames = {};
	hooks.charts = {};
	clearErrors();
	scheduleRefresh();
	const main = $('main');
	main.textContent = '';
	$('total-info').textContent = '';
	document.body.dataset.view = S.view;
	const done = track(Promise.resolve().then(async () => {
		try {
			await fitRange(gen);
		} catch (e) {
			showError(e);
		}
		if (!isCurrent(gen))
			return;
		renderHeader();
		if (S.view === 'gpu')
			return renderGpu(main, gen);
		if (S.view === 'alerts')
			return renderAlerts(main, gen);
		let has, valid;
		try {
			valid = await checkSelector(gen);
			if (!isCurrent(gen))
				return;
			has = await loadPickers(gen, valid);
		} catch (e) {
			showError(e);
			return;
		}
		if (!isCurrent(gen))
			return;
		renderHeader();
		if (!valid) {
			emptyState(main, 'Fix the selector', '<p>Nothing is shown for a selector the server ' +
				   'cannot read. Pick a service above, or write matchers as ' +
				   '<code>{service_name="app", type="cpu", pid=~"12.*"}</code>.</p>');
			return;
		}
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
