// speedscope.js: the "open in speedscope" page. Renders a speedscope JSON
// file (https://www.speedscope.app/file-format-schema.json) with Sonde's own
// flame graph, since speedscope's app cannot be fetched at run time: the
// export of the profile view (/api/v1/speedscope with the same query, from and
// until as this page's URL), or a file the user opens or drops. Sampled and
// evented profiles; "left heavy" and "time order" layouts. Loaded by
// speedscope.html.

import { getJSON, apiURL } from './api.js';
import { FlameGraph } from './flamegraph.js';
import { fromTree, nameMatcher, search } from './model.js';
import { UNITS, validate, buildTree } from './speedscope-file.js';
import { fmtPct, fmtValue, escapeHTML } from './format.js';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
let file = null, mode = 'left', orient = params.get('orient') === 'flame' ? 'flame' : 'icicle';
let model = null;
const flame = new FlameGraph($('flame-host'), { orientation: orient });
window.__sonde = { flame, file: () => file, model: () => model };

function showError(msg) {
	const el = document.createElement('div');
	el.className = 'error';
	el.textContent = msg;
	$('errors').append(el);
}

function show() {
	const p = file.profiles[+$('profile').value || 0];
	let tree;
	try {
		tree = buildTree(p, file.shared.frames, mode);
	} catch (e) {
		showError(`can't show this profile: ${e.message}`);
		return;
	}
	model = fromTree(tree, UNITS[p.unit] ?? p.unit ?? '', mode === 'left' ? 'weight' : 'insertion');
	flame.setModel(model);
	$('summary').textContent = `${p.type} · ${fmtValue(model.numTicks, model.unit)} · ` +
		`${file.shared.frames.length} frames`;
	applySearch();
}

function applySearch() {
	const out = $('search-share');
	let m;
	try {
		m = nameMatcher($('search').value);
	} catch (e) {
		out.textContent = e.message;
		return;
	}
	if (!m || !model) {
		out.textContent = '';
		flame.setMatched(null);
		return;
	}
	const r = search(model, m);
	flame.setMatched(r.matched);
	out.innerHTML = `${r.functions} matched · <b>${fmtPct(model.numTicks ? r.ticks / model.numTicks : 0)}` +
		'</b> of the total';
}

function load(f, source) {
	try {
		validate(f);
	} catch (e) {
		showError(`can't show ${source}: ${e.message}`);
		return;
	}
	$('errors').textContent = '';
	file = f;
	$('source').textContent = source;
	$('profile').innerHTML = f.profiles.map((p, i) =>
		`<option value="${i}">${escapeHTML(p.name || 'profile ' + (i + 1))}</option>`).join('');
	$('profile').value = String(f.activeProfileIndex || 0);
	show();
}

function openFile(fl) {
	const rd = new FileReader();
	rd.onload = () => {
		let f;
		try {
			f = JSON.parse(rd.result);
		} catch (e) {
			showError(`can't read ${fl.name}: not JSON (${e.message})`);
			return;
		}
		load(f, fl.name);
	};
	rd.readAsText(fl);
}

$('profile').addEventListener('change', show);
for (const b of document.querySelectorAll('#modes button'))
	b.addEventListener('click', () => {
		mode = b.dataset.mode;
		for (const x of document.querySelectorAll('#modes button'))
			x.classList.toggle('active', x === b);
		if (file)
			show();
	});
$('search').addEventListener('input', applySearch);
const orientLabel = () => ($('orient').textContent = orient === 'flame' ? 'Flame ▲ (root at bottom)'
	: 'Icicle ▼ (root on top)');
orientLabel();
$('orient').addEventListener('click', () => {
	orient = orient === 'flame' ? 'icicle' : 'flame';
	orientLabel();
	flame.setOrientation(orient);
});
$('file').addEventListener('change', (e) => e.target.files[0] && openFile(e.target.files[0]));
document.addEventListener('dragover', (e) => e.preventDefault());
document.addEventListener('drop', (e) => {
	e.preventDefault();
	if (e.dataTransfer.files[0])
		openFile(e.dataTransfer.files[0]);
});

const q = {};
for (const k of ['query', 'from', 'until'])
	if (params.has(k))
		q[k] = params.get(k);
$('back').href = './' + (location.search || '');
if (q.query) {
	document.body.dataset.busy = '1';
	getJSON('/api/v1/speedscope', q)
		.then((f) => load(f, apiURL('/api/v1/speedscope', q)))
		.catch((e) => showError(e.message))
		.finally(() => (document.body.dataset.busy = '0'));
} else {
	$('summary').textContent = 'Open a speedscope file, or come here from a profile\'s "open in ' +
		'speedscope view" link.';
}
