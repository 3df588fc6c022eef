// page.js: what every view of the UI shares -- the state in the URL, the
// calls to the server, errors and empty states, selectors, time steps, and
// the timeline chart and toolbar. Used by app.js and the views' modules.

import { getJSON } from './api.js';
import { TimeChart } from './charts.js';
import { fmtValue, resolveTime, escapeHTML } from './format.js';

export const DEFAULTS = {
	view: 'both', query: '', from: 'now-1h', until: 'now', search: '', orient: 'icicle',
	fn: '', sort: 'self', dir: 'desc', filter: '', left_from: '', left_until: '',
	right_from: '', right_until: '', right_query: '', gpu_query: '',
	// The zoomed flame graph node (its path of names, joined by ';'), the
	// table's share of the profile view's width (%), the diff's colour
	// scale (percentage points), the flame graph's colours ('module' or by
	// name), a label to group stacks by, and the auto-refresh period.
	zoom: '', split: '', scale: '', color: '', group: '', refresh: '',
	// What the flame graph leaves out: the function it is focused on, and
	// those hidden and collapsed (names joined by ';').
	focus: '', hide: '', collapse: '',
	// The stacks' frames: '' the Python view (a Python program's frames and
	// the native code they call, the interpreter folded; other stacks
	// whole), 'all' every frame.
	frames: '',
};
export const PROFILE_VIEWS = ['both', 'flame', 'table', 'sandwich'];
export const VIEWS = [...PROFILE_VIEWS, 'diff', 'gpu', 'alerts'];
// The pickers, broadest first: each lists the values of its label among
// the series the ones before it select. Job, rank and pod show only where
// the range has such labels (the agent's, from a process's environment).
export const PICKS = [['type', 'pick-type'], ['service_name', 'pick-service'], ['job', 'pick-job'],
	['rank', 'pick-rank'], ['pod', 'pick-pod'], ['comm', 'pick-comm'], ['thread', 'pick-thread'],
	['pid', 'pick-pid']];
export const OPTIONAL_PICKS = new Set(['job', 'rank', 'pod']);
export const RANGES = [['now-5m', 'Last 5 minutes'], ['now-15m', 'Last 15 minutes'],
		['now-1h', 'Last hour'], ['now-6h', 'Last 6 hours'], ['now-24h', 'Last 24 hours'],
		['now-7d', 'Last 7 days']];

export const $ = (id) => document.getElementById(id);
export const S = readState();
export const hooks = { flame: null, flames: {}, charts: {}, state: S, renders: 0 };
window.__sonde = hooks;
let generation = 0;
let busy = 0;
let renderer = () => {};
// What the current view must undo before the next one draws (charts'
// listeners, flame graphs): run and emptied by newGeneration().
export const cleanups = [];

// The function that draws the page from S (app.js's render).
export function setRenderer(fn) {
	renderer = fn;
}

// A new draw begins: the previous one's cleanups run, and its answers,
// arriving late, are dropped (they see isCurrent(gen) false).
export function newGeneration() {
	for (const c of cleanups.splice(0))
		c();
	return ++generation;
}

export const isCurrent = (gen) => gen === generation;

export function readState() {
	const p = new URLSearchParams(location.search);
	const s = { ...DEFAULTS };
	for (const k of Object.keys(DEFAULTS))
		if (p.has(k))
			s[k] = p.get(k);
	if (!VIEWS.includes(s.view))
		s.view = DEFAULTS.view;
	return s;
}

export function stateURL(over = {}) {
	const s = { ...S, ...over };
	const p = new URLSearchParams();
	for (const k of Object.keys(DEFAULTS))
		if (s[k] !== DEFAULTS[k] && s[k] !== undefined)
			p.set(k, s[k]);
	const q = p.toString();
	return location.pathname + (q ? '?' + q : '');
}

// Saves the state in the URL: a new history entry when push (a user's
// navigation), else in place (a default filled in, a search typed).
export function writeState(push) {
	const url = stateURL();
	if (url === location.pathname + location.search)
		return;
	if (push)
		history.pushState(null, '', url);
	else
		history.replaceState(null, '', url);
}

export function setState(changes, push = true) {
	Object.assign(S, changes);
	writeState(push);
	renderer();
}

window.addEventListener('popstate', () => {
	Object.assign(S, readState());
	renderer();
});

export function track(p) {
	busy++;
	document.body.dataset.busy = busy;
	return p.finally(() => {
		busy--;
		document.body.dataset.busy = busy;
	});
}

export function api(path, params) {
	return track(getJSON(path, params));
}

// ---- errors and empty states ------------------------------------------------

// A page being left aborts its requests: not an error to show.
let leaving = false;
window.addEventListener('pagehide', () => (leaving = true));
window.addEventListener('beforeunload', () => (leaving = true));

export function showError(e) {
	if (leaving)
		return;
	console.error(e);
	const box = $('errors');
	const msg = e && e.message ? e.message : String(e);
	for (const el of box.children)
		if (el.dataset.msg === msg)
			return;
	const el = document.createElement('div');
	el.className = 'error';
	el.dataset.msg = msg;
	el.innerHTML = `<span>${escapeHTML(msg)}</span><button class="small" title="Dismiss">×</button>`;
	el.querySelector('button').addEventListener('click', () => el.remove());
	box.append(el);
}

export function clearErrors() {
	$('errors').textContent = '';
}

export function emptyState(host, title, html) {
	const el = document.createElement('div');
	el.className = 'empty';
	el.innerHTML = `<h2>${escapeHTML(title)}</h2>${html}`;
	host.append(el);
	return el;
}

export const NO_PROFILES = `<p>Sonde has no profiles in this time range. To get some:</p><ul>
<li>run <code>sonde run</code> on this machine (agent, server and UI in one), or</li>
<li>point an agent at this server: <code>sonde agent --server http://${location.host}</code>, or</li>
<li>send folded stacks as Pyroscope clients do:
<code>curl --data-binary @app.folded 'http://${location.host}/ingest?name=app.cpu'</code>.</li></ul>
<p>Or pick a longer time range above.</p>`;

// ---- selectors ----------------------------------------------------------------

const MATCHER = /([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"/g;

export function parseMatchers(q) {
	const out = [];
	q = (q || '').trim();
	const app = /^([^{.\s]+)\.([^{\s]+)/.exec(q);
	if (app)
		out.push(['service_name', '=', app[1]], ['type', '=', app[2]]);
	for (const m of q.matchAll(MATCHER))
		out.push([m[1], m[2], m[3].replace(/\\(.)/g, '$1')]);
	return out;
}

const quote = (v) => '"' + v.replace(/[\\"]/g, (c) => '\\' + c) + '"';

export function formatMatchers(ms) {
	return '{' + ms.map(([k, op, v]) => `${k}${op}${quote(v)}`).join(', ') + '}';
}

export function pickOf(label) {
	const m = parseMatchers(S.query).find(([k, op]) => k === label && op === '=');
	return m ? m[2] : '';
}

export function withPick(query, label, value) {
	const ms = parseMatchers(query).filter(([k, op]) => !(k === label && op === '='));
	if (value)
		ms.push([label, '=', value]);
	const order = ['service_name', 'type', 'comm', 'thread', 'pid'];
	ms.sort((a, b) => {
		const ia = order.indexOf(a[0]), ib = order.indexOf(b[0]);
		return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib);
	});
	return formatMatchers(ms);
}

export function range() {
	return { from: S.from, until: S.until };
}

// The timeline's step: about 300 points over the range, rounded up to a
// round duration so that agents' 10 s windows fall evenly into the steps.
const STEPS_MS = [1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400]
	.map((s) => s * 1000);

export function stepFor(from, until) {
	const span = resolveTime(until) - resolveTime(from);
	if (!(span > 0))
		return '';
	return String(STEPS_MS.find((s) => s >= span / 300) || Math.ceil(span / 300 / 86400e3) * 86400e3);
}

export function timeline(host, opts) {
	const c = new TimeChart(host, { kind: 'bars', height: opts.height || 110, selectable: true,
		format: (v) => fmtValue(v, opts.unit === 'samples' ? '' : opts.unit) + '/s', ...opts });
	cleanups.push(() => c.destroy());
	return c;
}

export function timelineData(ts) {
	const stepS = ts.step_ms / 1000;
	return {
		from: ts.start_ms,
		until: ts.start_ms + ts.values.length * ts.step_ms,
		series: [{ label: '', step: ts.step_ms,
			   points: ts.values.map((v, i) => [ts.start_ms + i * ts.step_ms, v / stepS]) }],
	};
}

export function toolbar(host, withTabs) {
	const bar = document.createElement('div');
	bar.className = 'toolbar';
	if (withTabs) {
		const tabs = document.createElement('span');
		tabs.className = 'tabs';
		for (const [v, t] of [['both', 'Table + flame graph'], ['flame', 'Flame graph'],
				      ['table', 'Top functions'], ['sandwich', 'Sandwich']]) {
			const b = document.createElement('button');
			b.textContent = t;
			b.dataset.view = v;
			b.className = S.view === v ? 'active' : '';
			b.addEventListener('click', () => setState({ view: v }));
			tabs.append(b);
		}
		bar.append(tabs);
	}
	host.append(bar);
	return bar;
}
