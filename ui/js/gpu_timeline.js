// gpu_timeline.js: the GPU page's kernel timeline -- each kernel and copy
// the agents shipped (GET /api/v1/gpu/timeline; timed on the GPU by CUPTI,
// in the job, by Sonde's CUPTI library) as a bar in time on its lane, a
// lane per device and stream grouped by process, drawn on a canvas per
// lane under a time axis whose ticks follow the zoom (ns, µs, ms, s).
//
// Zoom and pan as in Perfetto and Nsight Systems: ctrl+wheel (a touchpad's
// pinch) zooms around the pointer, shift+wheel or a sideways wheel pans,
// W/S zoom and A/D pan while the pointer is over the timeline or it has
// the focus, shift+drag (or a middle-button drag) pans, and "Reset zoom"
// shows the page's whole range again. A plain drag across a lane selects
// a range (the page's from/until), as on the page's charts. A bar narrower
// than a pixel is drawn a pixel wide, so that dense kernels stay visible.
// Hovering a bar shows its name, duration, stream and the CPU stack that
// launched it. The view is on the panel and its axis as
// data-view-start-ns/data-view-end-ns (ns since the epoch, exact) and
// through window.__sonde.gpuTimeline (the view, the axis's ticks, the bars
// drawn). Used by gpu.js.

import { fmtDuration, fmtCount, escapeHTML } from './format.js';
import { hooks, cleanups } from './page.js';

// A lane's name: a device's stream, or the host's waits for the GPU
// (CUPTI's synchronisation records: device -1, on a stream or none).
function laneName(lane) {
	if (lane.device < 0)
		return lane.stream ? `host waits · stream ${lane.stream}` : 'host waits';
	return `GPU ${lane.device} · stream ${lane.stream}`;
}

const NAME_W = 150;     // the lanes' name column (CSS px), gpu.css's .gpu-tl-name
const MIN_SPAN_NS = 1000; // the deepest zoom: 1 µs across the track
const KEY_ZOOM = 0.8;   // W: the view's span times this; S: divided by it
const KEY_PAN = 0.1;    // A/D: a tenth of the view

// Where the CUPTI library comes from, for a job without it.
export const CUPTI_HINT = 'start the job with <code>CUDA_INJECTION64_PATH=&lt;path&gt;/' +
	'libsonde_cupti.so</code> (the library beside the agent\'s <code>sonde</code> binary; ' +
	'the agent names the path at start; see docs/cli.md)';

export const SOURCE_CUPTI = 'timed on the GPU by CUPTI';
export const SOURCE_PROBES = 'seen at the CUDA call';

// A tick step of 1, 2 or 5 times a power of ten (ns) near raw.
function niceStep(raw) {
	const p = 10 ** Math.floor(Math.log10(Math.max(raw, 1)));
	const m = raw / p;
	return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

// d ns as a tick label: its unit from the largest label of the axis (top),
// as many decimals as the step needs.
function tickLabel(d, step, top) {
	if (d === 0)
		return '0';
	const [div, unit] = top >= 1e9 ? [1e9, 's'] : top >= 1e6 ? [1e6, 'ms'] : top >= 1e3
		? [1e3, 'µs'] : [1, 'ns'];
	const dec = Math.min(6, Math.max(0, Math.ceil(Math.log10(div / step) - 1e-9)));
	return (d / div).toFixed(dec) + ' ' + unit;
}

// The axis over the view [start, end) (ns from the range's start) on w px:
// its origin (ticks are labelled from it: a round time at or before the
// view, so that labels stay short however deep the zoom) and its ticks
// [{t, x, label}].
export function axisTicks(start, end, w) {
	const span = Math.max(1, end - start);
	const step = niceStep(span / Math.max(2, Math.floor(w / 90)));
	const big = 10 ** Math.ceil(Math.log10(span));
	const origin = Math.floor(start / big) * big;
	const ticks = [];
	for (let t = Math.ceil(start / step) * step; t <= end; t += step)
		ticks.push({ t, x: (t - start) / span * w, label: '' });
	const top = Math.max(...ticks.map((k) => Math.abs(k.t - origin)), 1);
	for (const k of ticks)
		k.label = tickLabel(k.t - origin, step, top);
	return { origin, step, ticks };
}

// The origin as an offset from the range's start, to the step's precision.
function originLabel(origin, big) {
	if (origin === 0)
		return 'from the range\'s start';
	const dec = Math.min(9, Math.max(0, Math.ceil(-Math.log10(big / 1e9) - 1e-9)));
	return `from +${(origin / 1e9).toFixed(dec)} s`;
}

function themeColors(el) {
	const cs = getComputedStyle(el);
	const v = (name, dflt) => cs.getPropertyValue(name).trim() || dflt;
	return { kernel: v('--bar', '#e8743b'), copy: v('--accent', '#2f62c8'),
		 track: v('--bar-bg', '#e6e6ea'), ink: v('--ink', '#1d1d28'),
		 muted: v('--muted', '#5f5f6e'), line: v('--line', '#dcdce3') };
}

// The names in a list, at most five, then how many more.
function someNames(names) {
	const shown = names.slice(0, 5).map((n) => `<b>${escapeHTML(n)}</b>`);
	return shown.join(', ') + (names.length > 5 ? ` and ${names.length - 5} more` : '');
}

// Draws answer `tl` (the route's JSON) into host over [fromMs, untilMs).
// launched: [{name, launches}], the processes of the page's selection
// with kernel launches in the range (seen by the probes), for the panel
// to say which of them no kernel was timed for.
export function timelinePanel(host, tl, fromMs, untilMs, onSelect, launched = []) {
	const box = document.createElement('div');
	box.className = 'panel gpu-timeline';
	box.id = 'gpu-timeline';
	host.append(box);
	hooks.gpuTimeline = null;
	const procs = (tl && tl.processes) || [];
	const n = (tl && tl.spans) || 0;
	box.innerHTML = '<h3>Kernel timeline <span class="gpu-source" data-source="cupti">' +
		`${SOURCE_CUPTI}</span></h3>`;
	if (!n) {
		const total = launched.reduce((a, l) => a + l.launches, 0);
		box.insertAdjacentHTML('beforeend', launched.length
			? '<p class="gpu-tl-empty" id="gpu-timeline-empty">No kernels timed on the GPU ' +
			  `for this range: ${CUPTI_HINT}. ${someNames(launched.map((l) => l.name))} ` +
			  `launched ${escapeHTML(fmtCount(total))} kernels here (<span class="gpu-source" ` +
			  `data-source="probes">${SOURCE_PROBES}</span>), but no kernel's own time ` +
			  'reached this server: that comes from Sonde\'s CUPTI library inside the job, ' +
			  'shipped by the agent of its node with <code>--server</code>.</p>'
			: '<p class="muted gpu-tl-empty" id="gpu-timeline-empty">No kernels in this range: ' +
			  'the timeline comes from jobs started with Sonde\'s CUPTI library ' +
			  '(<code>CUDA_INJECTION64_PATH</code>) on a node whose agent ships to this ' +
			  'server.</p>');
		return;
	}
	// The kernels' own time on the GPU (CUPTI's; graphs timed as a whole
	// with them), the copies', the host's waits, in the range.
	let kns = 0, kn = 0, gn = 0, cns = 0, cn = 0, wns = 0, wn = 0;
	for (const p of procs)
		for (const lane of p.lanes)
			for (const s of lane.spans)
				if (s.kind === 'kernel' || s.kind === 'graph')
					(kns += s.dur_ns, s.kind === 'kernel' ? kn++ : gn++);
				else if (s.kind === 'sync')
					(wns += s.dur_ns, wn++);
				else
					(cns += s.dur_ns, cn++);
	box.insertAdjacentHTML('beforeend', '<p class="muted gpu-tl-about" id="gpu-timeline-about">' +
		`<span id="gpu-tl-kernel-time">${fmtCount(kn)} kernel${kn === 1 ? '' : 's'}` +
		(gn ? `, ${fmtCount(gn)} graph run${gn === 1 ? '' : 's'}` : '') +
		`, ${fmtDuration(kns / 1e9)} on the GPU</span>` +
		(cn ? `, ${fmtCount(cn)} cop${cn === 1 ? 'y' : 'ies'} (${fmtDuration(cns / 1e9)})` : '') +
		(wn ? `, ${fmtCount(wn)} host wait${wn === 1 ? '' : 's'} (${fmtDuration(wns / 1e9)})`
		    : '') +
		(tl.truncated ? ' among those shown' : ' in this range') + ' &mdash; <span ' +
		`class="gpu-source" data-source="cupti">${SOURCE_CUPTI}</span> (Sonde's CUPTI ` +
		'library in the job); the launches and waits of the charts above are ' +
		`<span class="gpu-source" data-source="probes">${SOURCE_PROBES}</span> (Sonde's ` +
		'probes).</p>' + (tl.truncated
		? `<p class="muted" id="gpu-timeline-cut">The first ${n} kernels and copies of the ` +
		  'range: select a shorter range to see them all.</p>' : ''));
	// The processes with launches and none of these spans (the names the
	// probes saw, against the names the spans carry).
	const timed = new Set(procs.map((p) => (p.labels || {}).process || (p.labels || {}).comm));
	const untimed = launched.filter((l) => !timed.has(l.name));
	if (untimed.length && !tl.truncated)
		box.insertAdjacentHTML('beforeend', '<p class="muted gpu-tl-untimed" ' +
			`id="gpu-timeline-untimed">No kernels timed on the GPU for ` +
			`${someNames(untimed.map((l) => l.name))}, which launched kernels in this range: ` +
			`${CUPTI_HINT}.</p>`);

	// The controls, the axis and the lanes.
	const bar = document.createElement('div');
	bar.className = 'gpu-tl-controls';
	bar.innerHTML = '<span class="gpu-tl-hint muted">Ctrl+wheel or W/S: zoom · shift+drag, ' +
		'shift+wheel or A/D: pan · drag: select a range</span><span class="gpu-tl-shown muted" ' +
		'aria-live="polite"></span><button type="button" id="gpu-tl-reset">Reset zoom</button>';
	box.append(bar);
	const shown = bar.querySelector('.gpu-tl-shown');
	const reset = bar.querySelector('#gpu-tl-reset');
	const body = document.createElement('div');
	body.className = 'gpu-tl-body';
	body.tabIndex = 0;
	body.setAttribute('role', 'group');
	body.setAttribute('aria-label', 'Kernel timeline: W and S zoom, A and D pan');
	box.append(body);
	const axisRow = document.createElement('div');
	axisRow.className = 'gpu-tl-axisrow';
	axisRow.innerHTML = '<span class="gpu-tl-name gpu-tl-origin"></span>' +
		'<canvas class="gpu-tl-axis" aria-hidden="true"></canvas>';
	body.append(axisRow);
	const axis = axisRow.querySelector('canvas');
	const originEl = axisRow.querySelector('.gpu-tl-origin');
	const sel = document.createElement('div');
	sel.className = 'gpu-tl-sel';
	sel.hidden = true;
	const tip = document.createElement('div');
	tip.className = 'gpu-tl-tip';
	tip.hidden = true;

	// Offsets are from base_ns (from_ms, the server's from, raised to its
	// retention): the view is in ns from fromMs, the page's from.
	const shift = ((tl.from_ms ?? fromMs) - fromMs) * 1e6;
	const len = Math.round(Math.max(MIN_SPAN_NS, (untilMs - fromMs) * 1e6));
	const lanes = [];
	for (const p of procs) {
		const l = p.labels || {};
		const head = document.createElement('div');
		head.className = 'gpu-tl-proc';
		head.textContent = [l.process || l.comm || '?', l.pid && 'pid ' + l.pid, l.node]
			.filter(Boolean).join(' · ');
		body.append(head);
		for (const lane of p.lanes) {
			const row = document.createElement('div');
			row.className = 'gpu-tl-lane';
			row.dataset.device = lane.device;
			row.dataset.stream = lane.stream;
			row.dataset.spans = lane.spans.length;
			row.innerHTML = `<span class="gpu-tl-name">${escapeHTML(laneName(lane))}</span>` +
				'<canvas class="gpu-tl-track" role="img" aria-label="' +
				`${escapeHTML(laneName(lane))}: ${lane.spans.length} ` +
				(lane.device < 0 ? 'waits' : 'kernels and copies') + '"></canvas>';
			const spans = lane.spans.map((s) => ({ ...s, t0: s.offset_ns + shift,
							       t1: s.offset_ns + shift + s.dur_ns }))
				.sort((a, b) => a.t0 - b.t0);
			let longest = 0;
			for (const s of spans)
				longest = Math.max(longest, s.dur_ns);
			lanes.push({ lane, row, canvas: row.querySelector('canvas'), spans, longest,
				     key: `${lane.device}/${lane.stream}`, pid: l.pid });
			body.append(row);
		}
	}
	body.append(sel);
	box.append(tip);

	let view = { start: 0, end: len };
	let hot = null;        // the hovered span and its lane
	let over = false;      // the pointer is over the lanes
	let pointerX = null;   // its x on the tracks, CSS px
	let raf = 0;
	const trackW = () => Math.max(1, axis.clientWidth);
	const clampView = (start, span) => {
		// Whole nanoseconds: the view since the epoch is exact.
		span = Math.round(Math.min(len, Math.max(MIN_SPAN_NS, span)));
		start = Math.round(Math.min(len - span, Math.max(0, start)));
		view = { start, end: start + span };
		schedule();
	};
	const zoom = (k, frac = 0.5) => {
		const span = view.end - view.start, at = view.start + frac * span;
		const ns = Math.min(len, Math.max(MIN_SPAN_NS, span * k));
		clampView(at - frac * ns, ns);
	};
	const pan = (dns) => clampView(view.start + dns, view.end - view.start);
	const resetView = () => clampView(0, len);
	const abs = (t) => (BigInt(Math.round(fromMs)) * 1000000n + BigInt(Math.round(t))).toString();

	// The spans of a lane in [a, b) ns, in order of start.
	function visible(L, a, b) {
		// The first span that may end after a: binary search on start.
		let lo = 0, hi = L.spans.length;
		const from = a - L.longest;
		while (lo < hi) {
			const mid = (lo + hi) >> 1;
			if (L.spans[mid].t0 < from)
				lo = mid + 1;
			else
				hi = mid;
		}
		const out = [];
		for (let i = lo; i < L.spans.length && L.spans[i].t0 < b; i++)
			if (L.spans[i].t1 > a || L.spans[i].dur_ns === 0 && L.spans[i].t0 >= a)
				out.push(L.spans[i]);
		return out;
	}
	// Where span s is drawn on a track w px wide: [x, w], snapped to device
	// pixels, at least a pixel wide.
	function rectOf(s, w, dpr) {
		const k = w / (view.end - view.start);
		const x0 = Math.max(-1, (s.t0 - view.start) * k), x1 = Math.min(w + 1, (s.t1 - view.start) * k);
		const x = Math.floor(x0 * dpr) / dpr;
		return [x, Math.max(1, Math.round((x1 - x) * dpr) / dpr)];
	}

	function sizeCanvas(c, w, h, dpr) {
		if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
			c.width = Math.round(w * dpr);
			c.height = Math.round(h * dpr);
		}
		const ctx = c.getContext('2d');
		ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
		ctx.clearRect(0, 0, w, h);
		return ctx;
	}

	let lastTicks = { origin: 0, ticks: [] };
	function draw() {
		raf = 0;
		if (!box.isConnected)
			return;
		const dpr = window.devicePixelRatio || 1, w = trackW(), th = themeColors(box);
		const span = view.end - view.start;
		// The axis: a tick and its label every step.
		const ax = axisTicks(view.start, view.end, w);
		lastTicks = ax;
		const ah = axis.clientHeight || 20;
		let ctx = sizeCanvas(axis, w, ah, dpr);
		ctx.font = '11px system-ui, sans-serif';
		ctx.textBaseline = 'top';
		ctx.fillStyle = th.line;
		ctx.fillRect(0, ah - 1, w, 1);
		for (const k of ax.ticks) {
			const x = Math.round(k.x * dpr) / dpr;
			ctx.fillStyle = th.line;
			ctx.fillRect(x, ah - 6, 1, 6);
			ctx.fillStyle = th.muted;
			const tw = ctx.measureText(k.label).width;
			if (x + 3 + tw <= w)
				ctx.fillText(k.label, x + 3, 3);
		}
		const big = 10 ** Math.ceil(Math.log10(Math.max(1, span)));
		originEl.textContent = originLabel(ax.origin, big);
		originEl.title = new Date(fromMs + ax.origin / 1e6).toISOString();
		// The lanes: each span a bar (kernels --bar, copies --accent), runs of
		// bars of one kind that touch drawn as one.
		for (const L of lanes) {
			const h = L.canvas.clientHeight || 14;
			ctx = sizeCanvas(L.canvas, w, h, dpr);
			ctx.fillStyle = th.track;
			ctx.fillRect(0, 0, w, h);
			let run = null;
			const flush = () => {
				if (run) {
					ctx.fillStyle = run.copy ? th.copy : th.kernel;
					ctx.fillRect(run.x, 1, run.e - run.x, h - 2);
				}
				run = null;
			};
			for (const s of visible(L, view.start, view.end)) {
				const [x, bw] = rectOf(s, w, dpr),
					copy = s.kind !== 'kernel' && s.kind !== 'graph';
				if (run && run.copy === copy && x <= run.e)
					run.e = Math.max(run.e, x + bw);
				else {
					flush();
					run = { x, e: x + bw, copy };
				}
			}
			flush();
			if (hot && hot.L === L) {
				const [x, bw] = rectOf(hot.s, w, dpr);
				ctx.strokeStyle = th.ink;
				ctx.lineWidth = 1;
				ctx.strokeRect(x - 0.5, 0.5, bw + 1, h - 1);
			}
		}
		const a = abs(view.start), b = abs(view.end);
		for (const el of [box, axis]) {
			el.dataset.viewStartNs = a;
			el.dataset.viewEndNs = b;
		}
		const zoomed = view.start > 0 || view.end < len;
		box.classList.toggle('zoomed', zoomed);
		reset.disabled = !zoomed;
		shown.textContent = zoomed ? `showing ${fmtDuration(span / 1e9)} of ` +
			`${fmtDuration(len / 1e9)}` : `showing the whole range (${fmtDuration(len / 1e9)})`;
	}
	function schedule() {
		if (!raf)
			raf = requestAnimationFrame(draw);
	}

	// The span under x px of lane L: one whose bar covers x, else the
	// nearest within 2 px.
	function spanAt(L, x) {
		const w = trackW(), dpr = window.devicePixelRatio || 1;
		const k = (view.end - view.start) / w;
		let best = null, bd = Infinity;
		for (const s of visible(L, view.start + (x - 3) * k, view.start + (x + 3) * k)) {
			const [bx, bw] = rectOf(s, w, dpr);
			const d = x < bx ? bx - x : x >= bx + bw ? x - (bx + bw) + 1e-3 : 0;
			if (d <= 2 && d < bd)
				[best, bd] = [s, d];
		}
		return best;
	}
	function showTip(L, s, e) {
		const from = (s.from || '').split(' < ').filter(Boolean);
		tip.innerHTML = `<b>${escapeHTML(s.name)}</b><br>` +
			`${escapeHTML(fmtDuration(s.dur_ns / 1e9))} ${SOURCE_CUPTI} · ` +
			escapeHTML(laneName(L.lane)) + (s.bytes ? ` · ${s.bytes} bytes` : '') +
			(from.length ? '<div class="gpu-tl-stack">launched from:<br>' +
			 from.map(escapeHTML).join('<br>') + '</div>' : '');
		tip.hidden = false;
		const b = box.getBoundingClientRect(), r = L.canvas.getBoundingClientRect();
		tip.style.left = Math.max(0, Math.min(e.clientX - b.left, b.width - 360)) + 'px';
		tip.style.top = (r.bottom - b.top + 4) + 'px';
	}

	// Pointer: hover, drag to select, shift+drag or middle drag to pan.
	let drag = null;
	const xOn = (e) => e.clientX - axis.getBoundingClientRect().left;
	for (const L of lanes) {
		const c = L.canvas;
		c.addEventListener('pointerdown', (e) => {
			if (e.button !== 0 && e.button !== 1)
				return;
			e.preventDefault();
			body.focus({ preventScroll: true });
			c.setPointerCapture(e.pointerId);
			const panning = e.shiftKey || e.button === 1;
			drag = { x0: xOn(e), x: xOn(e), panning, view: { ...view } };
			box.classList.toggle('panning', panning);
			tip.hidden = true;
		});
		c.addEventListener('pointermove', (e) => {
			pointerX = xOn(e);
			if (drag) {
				drag.x = pointerX;
				if (drag.panning) {
					const k = (drag.view.end - drag.view.start) / trackW();
					clampView(drag.view.start - (drag.x - drag.x0) * k,
						  drag.view.end - drag.view.start);
				} else {
					const br = body.getBoundingClientRect(), ar = axis.getBoundingClientRect();
					const x0 = Math.max(0, Math.min(drag.x0, drag.x));
					const x1 = Math.min(trackW(), Math.max(drag.x0, drag.x));
					sel.style.left = (ar.left - br.left + x0) + 'px';
					sel.style.width = Math.max(0, x1 - x0) + 'px';
					sel.hidden = x1 - x0 < 4;
				}
				return;
			}
			const s = spanAt(L, pointerX);
			if (!s) {
				if (hot)
					(hot = null, schedule());
				tip.hidden = true;
				return;
			}
			if (!hot || hot.s !== s)
				(hot = { L, s }, schedule());
			showTip(L, s, e);
		});
		c.addEventListener('pointerleave', () => {
			if (drag)
				return;
			tip.hidden = true;
			if (hot)
				(hot = null, schedule());
		});
		const end = (e, cancel) => {
			if (!drag)
				return;
			const d = drag;
			drag = null;
			sel.hidden = true;
			box.classList.remove('panning');
			if (cancel || d.panning || Math.abs(d.x - d.x0) < 4)
				return;
			const w = trackW(), span = view.end - view.start;
			const at = (x) => fromMs + (view.start + span * Math.min(1, Math.max(0, x / w))) / 1e6;
			const a = Math.floor(at(Math.min(d.x0, d.x)));
			const b = Math.ceil(at(Math.max(d.x0, d.x)));
			if (b > a && onSelect)
				onSelect(a, b);
		};
		c.addEventListener('pointerup', (e) => end(e, false));
		c.addEventListener('pointercancel', (e) => end(e, true));
		c.addEventListener('auxclick', (e) => e.preventDefault());
	}
	body.addEventListener('pointerenter', () => (over = true));
	body.addEventListener('pointerleave', () => {
		over = false;
		pointerX = null;
	});
	body.addEventListener('pointermove', (e) => (pointerX = xOn(e)));
	// The wheel: ctrl (a pinch) zooms around the pointer; shift, or a
	// sideways wheel, pans; a plain wheel scrolls the page.
	body.addEventListener('wheel', (e) => {
		const unit = e.deltaMode === 1 ? 16 : e.deltaMode === 2 ? 400 : 1;
		const dx = e.deltaX * unit, dy = e.deltaY * unit, w = trackW();
		if (e.ctrlKey || e.metaKey) {
			e.preventDefault();
			const frac = Math.min(1, Math.max(0, xOn(e) / w));
			zoom(Math.exp(Math.max(-300, Math.min(300, dy)) * 0.002), frac);
		} else if (e.shiftKey || Math.abs(dx) > Math.abs(dy)) {
			e.preventDefault();
			pan((Math.abs(dx) > Math.abs(dy) ? dx : dy) / w * (view.end - view.start));
		}
	}, { passive: false });
	// W/S zoom (around the pointer when it is over the lanes), A/D pan.
	const onKey = (e) => {
		if (!box.isConnected || e.ctrlKey || e.metaKey || e.altKey)
			return;
		const t = e.target;
		if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName)))
			return;
		if (!over && !box.contains(document.activeElement))
			return;
		const frac = over && pointerX !== null ? Math.min(1, Math.max(0, pointerX / trackW())) : 0.5;
		const span = view.end - view.start;
		switch (e.key.toLowerCase()) {
		case 'w': zoom(KEY_ZOOM, frac); break;
		case 's': zoom(1 / KEY_ZOOM, frac); break;
		case 'a': pan(-KEY_PAN * span); break;
		case 'd': pan(KEY_PAN * span); break;
		default: return;
		}
		e.preventDefault();
	};
	document.addEventListener('keydown', onKey);
	reset.addEventListener('click', resetView);
	const ro = new ResizeObserver(schedule);
	ro.observe(body);
	const mo = new MutationObserver(schedule);
	mo.observe(document.documentElement, { attributes: true, attributeFilter: ['data-theme', 'class'] });
	window.addEventListener('sonde-theme', schedule);
	cleanups.push(() => {
		document.removeEventListener('keydown', onKey);
		window.removeEventListener('sonde-theme', schedule);
		ro.disconnect();
		mo.disconnect();
		if (raf)
			cancelAnimationFrame(raf);
		hooks.gpuTimeline = null;
	});

	// What the tests read: the view (ns from the range's start, and since
	// the epoch), the axis's ticks, each span's bar as drawn (page px).
	hooks.gpuTimeline = {
		len,
		view: () => ({ start: view.start, end: view.end, startNs: abs(view.start), endNs: abs(view.end) }),
		ticks: () => ({ origin: lastTicks.origin, labels: lastTicks.ticks.map((k) => k.label),
				originLabel: originEl.textContent }),
		bars: () => {
			const w = trackW(), dpr = window.devicePixelRatio || 1;
			return lanes.flatMap((L) => {
				const r = L.canvas.getBoundingClientRect();
				return visible(L, view.start, view.end).map((s) => {
					const [x, bw] = rectOf(s, w, dpr);
					return { lane: L.key, name: s.name, kind: s.kind, x: r.left + x, w: bw,
						 y: r.top, h: r.height };
				});
			});
		},
		setView: (start, end) => clampView(start, end - start),
		drawn: () => !raf,
	};
	draw();
}
