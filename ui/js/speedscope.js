// speedscope.js: the "open in speedscope" page. Renders a speedscope JSON
// file (https://www.speedscope.app/file-format-schema.json) with Sonde's own
// flame graph, since speedscope's app cannot be fetched at run time: the
// export of the profile view (/api/v1/speedscope with the same query, from and
// until as this page's URL), or a file the user opens or drops. Sampled and
// evented profiles; "left heavy" and "time order" layouts. Loaded by
// speedscope.html.

import { getJSON, apiURL } from './api.js';
import { FlameGraph } from './flamegraph.js';
import { fromTree, treeNode, treeChild, nameMatcher, search } from './model.js';
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

const UNITS = { nanoseconds: 'nanoseconds', microseconds: 'microseconds', milliseconds: 'milliseconds',
		seconds: 'seconds', bytes: 'bytes', none: '' };

// Checks the parts of the format this page reads; throws with what is wrong.
function validate(f) {
	if (!f || typeof f !== 'object')
		throw new Error('not a JSON object');
	const frames = f.shared && f.shared.frames;
	if (!Array.isArray(frames))
		throw new Error('no shared.frames array -- is this a speedscope file?');
	if (!Array.isArray(f.profiles) || !f.profiles.length)
		throw new Error('no profiles');
	const okFrame = (i) => Number.isInteger(i) && i >= 0 && i < frames.length;
	f.profiles.forEach((p, k) => {
		if (p.type === 'sampled') {
			if (!Array.isArray(p.samples) || !Array.isArray(p.weights) ||
			    p.samples.length !== p.weights.length)
				throw new Error(`profile ${k}: samples and weights must be arrays of one length`);
			for (const s of p.samples)
				if (!Array.isArray(s) || !s.every(okFrame))
					throw new Error(`profile ${k}: a sample names a frame that does not exist`);
		} else if (p.type === 'evented') {
			if (!Array.isArray(p.events))
				throw new Error(`profile ${k}: no events`);
			for (const e of p.events)
				if (!okFrame(e.frame) || (e.type !== 'O' && e.type !== 'C') || !Number.isFinite(e.at))
					throw new Error(`profile ${k}: a malformed event ${JSON.stringify(e)}`);
		} else {
			throw new Error(`profile ${k}: unknown type ${JSON.stringify(p.type)}`);
		}
	});
}

// A profile's call tree: sampled stacks are root first; evented profiles
// open and close frames. In time order only consecutive equal calls merge.
function buildTree(p, frames) {
	const root = treeNode('total');
	const name = (i) => String(frames[i].name ?? `frame ${i}`);
	const child = (node, n) => {
		if (mode === 'left')
			return treeChild(node, n);
		const last = [...node.kids.values()].pop();
		if (last && last.name === n)
			return last;
		const c = treeNode(n);
		node.kids.set(Symbol(n), c);
		return c;
	};
	if (p.type === 'sampled') {
		p.samples.forEach((s, k) => {
			const w = +p.weights[k] || 0;
			if (w <= 0)
				return;
			let node = root;
			root.total += w;
			for (const fi of s) {
				node = child(node, name(fi));
				node.total += w;
			}
			node.self += w;
		});
	} else {
		const stack = [{ node: root, at: p.startValue || 0, inner: 0 }];
		for (const e of [...p.events].sort((a, b) => a.at - b.at)) {
			if (e.type === 'O') {
				const top = stack[stack.length - 1];
				stack.push({ node: child(top.node, name(e.frame)), at: e.at, inner: 0 });
			} else if (stack.length > 1) {
				const fr = stack.pop();
				const d = e.at - fr.at;
				fr.node.total += d;
				fr.node.self += d - fr.inner;
				stack[stack.length - 1].inner += d;
			}
		}
		root.total = stack[0].inner;
	}
	return root;
}

function show() {
	const p = file.profiles[+$('profile').value || 0];
	const tree = buildTree(p, file.shared.frames);
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
