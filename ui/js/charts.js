// charts.js: time charts on canvas with axes and units -- the samples-per-
// second timeline (bars; dragging selects a range) and the GPU page's line
// charts (one line per series, with a legend and a read-out of the series
// that have data at the pointer) -- and the colours of their series. Used by
// page.js (the timelines) and gpu.js.

import { fmtTick, fmtDate, escapeHTML } from './format.js';

const PAD = { l: 70, r: 12, t: 10, b: 22 }; // l: the least left margin (padL grows to fit the labels)
// 24 colours of about the same lightness, each at least 3:1 against white
// and against a dark page (#17181f), so that a line reads in either theme;
// picked from OKLCH farthest-first (any two differ by at least 0.078 in
// OKLab). Series beyond them get generated hues (extraColor).
export const PALETTE = ['#0a72da', '#f9601f', '#05a92e', '#af2f9b', '#80610d', '#ac76fd',
			'#08a2af', '#f15cad', '#ac9003', '#c91f3a', '#037465', '#7b4bd4', '#258101',
			'#bd6103', '#618ffd', '#13936b', '#c254ca', '#0581a3', '#ec4764', '#798205',
			'#d13783', '#1392d4', '#716df6', '#dd4115'];
const ACCENT = '#3b6fd8'; // a chart's only, unnamed series (the timeline's bars)
const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
		    43200, 86400, 172800, 604800].map((s) => s * 1000);
const NEAR_PX = 6; // the read-out lists a series with a point this close to the pointer...
const NEAR_STEPS = 1.5; // ...or within this many of its steps
const TIP_ROWS = 20;

// FNV-1a: a label's preferred palette slot, the same in every chart and load.
function hash(s) {
	let h = 0x811c9dc5;
	for (let i = 0; i < s.length; i++)
		h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
	return h >>> 0;
}

const hex = (c) => Math.round(255 * Math.min(1, Math.max(0, c <= 0.0031308 ? 12.92 * c
	: 1.055 * c ** (1 / 2.4) - 0.055))).toString(16).padStart(2, '0');

// The k-th colour past the palette: hues a golden angle apart at three
// lightnesses (OKLCH), the chroma lowered until the colour is in sRGB.
export function extraColor(k) {
	const L = [0.62, 0.55, 0.69][k % 3], h = (k * 137.508 + 20) % 360 * Math.PI / 180;
	let rgb;
	for (let C = 0.14; C > 0.02; C -= 0.01) {
		const a = C * Math.cos(h), b = C * Math.sin(h);
		const l = (L + 0.3963377774 * a + 0.2158037573 * b) ** 3;
		const m = (L - 0.1055613458 * a - 0.0638541728 * b) ** 3;
		const s = (L - 0.0894841775 * a - 1.2914855480 * b) ** 3;
		rgb = [4.0767416621 * l - 3.3077115913 * m + 0.2309699292 * s,
		       -1.2684380046 * l + 2.6097574011 * m - 0.3413193965 * s,
		       -0.0041960863 * l - 0.7034186147 * m + 1.7076147010 * s];
		if (rgb.every((c) => c >= 0 && c <= 1))
			break;
	}
	return '#' + rgb.map(hex).join('');
}

// A colour per label, never two alike: each label (in sorted order) takes
// its own slot of the palette's first 6, 12 or 24 colours (as few as hold
// the labels, the most distinct ones: by a hash of the label) or, when
// another took it, the next free one; past the palette, generated colours.
// The same labels get the same colours on every load, and a page that maps
// all its charts' labels at once (gpu.js) gives a label one colour in all
// of them.
export function colorMap(labels) {
	const out = new Map(), slots = new Set(), taken = new Set();
	const all = [...new Set(labels)].sort();
	const n = all.length <= 6 ? 6 : all.length <= 12 ? 12 : PALETTE.length;
	let extra = 0;
	for (const l of all) {
		let c;
		if (slots.size < n) {
			let i = hash(l) % n;
			while (slots.has(i))
				i = (i + 1) % n;
			slots.add(i);
			c = PALETTE[i];
		} else {
			do
				c = extraColor(extra++);
			while (taken.has(c) || PALETTE.includes(c));
		}
		taken.add(c);
		out.set(l, c);
	}
	return out;
}

// The usual distance between a series' points (the median of the first
// few hundred gaps), or 0 for fewer than two points.
export function typicalStep(points) {
	const d = [];
	for (let i = 1; i < points.length && d.length < 512; i++)
		if (points[i][0] > points[i - 1][0])
			d.push(points[i][0] - points[i - 1][0]);
	d.sort((a, b) => a - b);
	return d.length ? d[d.length >> 1] : 0;
}

// The point of a series nearest to time t that has a value (points in time
// order), or null.
function nearestPoint(points, t) {
	let lo = 0, hi = points.length;
	while (lo < hi) {
		const mid = (lo + hi) >> 1;
		if (points[mid][0] < t)
			lo = mid + 1;
		else
			hi = mid;
	}
	const ok = (p) => p && p[1] !== null && Number.isFinite(p[1]);
	let a = lo - 1, b = lo;
	while (a >= 0 && !ok(points[a]))
		a--;
	while (b < points.length && !ok(points[b]))
		b++;
	const pa = a >= 0 ? points[a] : null, pb = b < points.length ? points[b] : null;
	if (!pa)
		return pb;
	if (!pb)
		return pa;
	return t - pa[0] <= pb[0] - t ? pa : pb;
}

export function niceStep(x) {
	if (!(x > 0))
		return 1;
	const p = 10 ** Math.floor(Math.log10(x));
	const m = x / p;
	return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10) * p;
}

// The chart's ink from the page's theme (sonde.css's custom properties),
// read at each draw so that a theme switch redraws in the new colours.
function themeColors(el) {
	const cs = getComputedStyle(el);
	const v = (name, dflt) => cs.getPropertyValue(name).trim() || dflt;
	return { grid: v('--chart-grid', v('--line', '#e6e6ea')), text: v('--muted', '#555'),
		 ink: v('--ink', '#333') };
}

export class TimeChart {
	// opts: kind 'bars' | 'lines', height, format(v) for the y axis and the
	// read-out, selectable + onSelect(fromMs, untilMs) for drag selection,
	// onLegend(series) to make the legend's entries buttons (legendTitle(series)
	// their title).
	constructor(host, opts = {}) {
		this.opts = { kind: 'lines', height: 150, format: String, ...opts };
		this.padL = PAD.l;
		this.el = document.createElement('div');
		this.el.className = 'chart';
		if (opts.title) {
			const h = document.createElement('div');
			h.className = 'chart-title';
			h.textContent = opts.title;
			this.el.append(h);
		}
		this.legend = document.createElement('div');
		this.legend.className = 'legend';
		this.wrap = document.createElement('div');
		this.wrap.className = 'chart-wrap';
		this.canvas = document.createElement('canvas');
		this.empty = document.createElement('div');
		this.empty.className = 'chart-empty';
		this.empty.hidden = true;
		this.tip = document.createElement('div');
		this.tip.className = 'tooltip';
		this.tip.hidden = true;
		this.wrap.append(this.canvas, this.empty);
		this.el.append(this.legend, this.wrap);
		document.body.append(this.tip);
		host.append(this.el);
		this.ctx = this.canvas.getContext('2d');
		this.data = null;
		this.selections = [];
		this.drag = null;
		this.hoverX = -1;
		this.hovered = []; // the read-out's points, marked on the lines
		this.highlight = -1; // the series whose legend entry the pointer is on
		this.pending = false;
		this.canvas.addEventListener('mousedown', (e) => this.onDown(e));
		this.canvas.addEventListener('mousemove', (e) => this.onMove(e));
		this.canvas.addEventListener('mouseleave', () => {
			this.hoverX = -1;
			this.hovered = [];
			this.tip.hidden = true;
			this.schedule();
		});
		this.legend.addEventListener('click', (e) => {
			const b = e.target.closest('[data-i]');
			if (b && this.opts.onLegend)
				this.opts.onLegend(this.data.series[+b.dataset.i]);
		});
		this.legend.addEventListener('mouseover', (e) => {
			const b = e.target.closest('[data-i]');
			this.setHighlight(b ? +b.dataset.i : -1);
		});
		this.legend.addEventListener('mouseleave', () => this.setHighlight(-1));
		this.onUp = (e) => this.finishDrag(e);
		window.addEventListener('mouseup', this.onUp);
		this.ro = new ResizeObserver(() => this.schedule());
		this.ro.observe(this.wrap);
		// A theme switch (a class or data- attribute of <html>, or the
		// system's preference) changes the custom properties the axes use.
		this.mo = new MutationObserver(() => this.schedule());
		this.mo.observe(document.documentElement, { attributes: true });
		this.mq = window.matchMedia('(prefers-color-scheme: dark)');
		this.onScheme = () => this.schedule();
		this.mq.addEventListener('change', this.onScheme);
	}

	destroy() {
		this.ro.disconnect();
		this.mo.disconnect();
		this.mq.removeEventListener('change', this.onScheme);
		window.removeEventListener('mouseup', this.onUp);
		this.tip.remove();
		this.el.remove();
	}

	// data: {from, until, series: [{label, points: [[ms, v], ...], step,
	// color, width, dash}]}: points in time order, v null where there is no
	// value; step the usual distance between points (found when missing);
	// color from colorMap of the labels when missing.
	setData(data) {
		this.data = data;
		const named = data.series.filter((s) => !s.color);
		if (named.length === 1 && data.series.length === 1 && !named[0].label) {
			named[0].color = ACCENT;
		} else {
			const cm = colorMap(named.map((s) => s.label || ''));
			for (const s of named)
				s.color = cm.get(s.label || '');
		}
		for (const s of data.series)
			s.step = s.step || typicalStep(s.points);
		const button = !!this.opts.onLegend;
		this.legend.innerHTML = data.series.length > 1 || (data.series[0] && data.series[0].label)
			? data.series.map((s, i) => {
				const sw = `<i style="background:${s.color}"></i>${escapeHTML(s.label || '')}`;
				const title = this.opts.legendTitle ? this.opts.legendTitle(s) : '';
				const t = title ? ` title="${escapeHTML(title)}"` : '';
				return button && !s.noLegendClick
					? `<button type="button" class="legend-item" data-i="${i}"${t}>${sw}</button>`
					: `<span class="legend-item" data-i="${i}"${t}>${sw}</span>`;
			}).join('')
			: '';
		const has = data.series.some((s) => s.points.some((p) => p[1] > 0));
		this.empty.hidden = has;
		this.empty.textContent = this.opts.emptyText || 'No data in this range';
		this.hovered = [];
		this.schedule();
	}

	// The colour of each series, by label (what the lines are drawn in).
	colors() {
		const series = this.data ? this.data.series : [];
		return Object.fromEntries(series.map((s) => [s.label, s.color]));
	}

	// Highlighted ranges: [{from, until, color, label}].
	setSelections(sel) {
		this.selections = sel;
		this.schedule();
	}

	setHighlight(i) {
		if (i === this.highlight)
			return;
		this.highlight = i;
		this.schedule();
	}

	schedule() {
		if (this.pending)
			return;
		this.pending = true;
		requestAnimationFrame(() => {
			this.pending = false;
			this.draw();
		});
	}

	xOf(t) {
		const d = this.data;
		return this.padL + (t - d.from) / (d.until - d.from) * (this.w - this.padL - PAD.r);
	}

	tOf(x) {
		const d = this.data;
		const f = (x - this.padL) / (this.w - this.padL - PAD.r);
		return d.from + Math.min(1, Math.max(0, f)) * (d.until - d.from);
	}

	// Milliseconds per CSS pixel of the plot.
	msPerPx() {
		return (this.data.until - this.data.from) / Math.max(1, this.w - this.padL - PAD.r);
	}

	// What the read-out lists at time t: for bars, each series' bar that
	// holds t; for lines, each series' nearest point if it is within
	// NEAR_STEPS of the series' steps or NEAR_PX pixels of t -- a series
	// that has not started, has ended or has a gap there is not listed.
	// [{series, point}], the largest value first.
	near(t) {
		const out = [];
		const px = NEAR_PX * this.msPerPx();
		for (const s of this.data.series) {
			let p = null;
			if (this.opts.kind === 'bars') {
				for (const q of s.points)
					if (q[0] <= t && t < q[0] + (s.step || 0))
						p = q;
			} else {
				p = nearestPoint(s.points, t);
				if (p && Math.abs(p[0] - t) > Math.max(px, NEAR_STEPS * (s.step || 0)))
					p = null;
			}
			if (p)
				out.push({ series: s, point: p });
		}
		if (this.opts.kind !== 'bars')
			out.sort((a, b) => b.point[1] - a.point[1]);
		return out;
	}

	draw() {
		if (!this.data || !this.el.isConnected)
			return;
		const dpr = window.devicePixelRatio || 1;
		const w = Math.max(200, this.wrap.clientWidth), h = this.opts.height;
		if (w !== this.w || h !== this.h || dpr !== this.dpr) {
			this.w = w;
			this.h = h;
			this.dpr = dpr;
			this.canvas.width = Math.round(w * dpr);
			this.canvas.height = Math.round(h * dpr);
			this.canvas.style.width = w + 'px';
			this.canvas.style.height = h + 'px';
		}
		const ctx = this.ctx, d = this.data, th = themeColors(this.el);
		ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
		ctx.clearRect(0, 0, w, h);
		ctx.font = '11px system-ui, sans-serif';
		const y0 = h - PAD.b, y1 = PAD.t;
		let max = 0;
		for (const s of d.series)
			for (const p of s.points)
				if (p[0] >= d.from && p[0] <= d.until && p[1] > max && Number.isFinite(p[1]))
					max = p[1];
		// Byte axes step by powers of 1024 (1 GiB, 2 GiB, ...), others by 1-2-5.
		let step;
		if (this.opts.base2) {
			const u = 1024 ** Math.max(0, Math.floor(Math.log((max || 1) / 4) / Math.log(1024)));
			step = niceStep((max || 1) / 4 / u) * u;
		} else {
			step = niceStep((max || 1) / 4);
		}
		const top = Math.max(step, Math.ceil((max || 1) / step) * step);
		// The left margin fits the widest y label ("1,000 launches/s").
		let widest = 0;
		for (let v = 0; v <= top + step / 2; v += step)
			widest = Math.max(widest, ctx.measureText(this.opts.format(v)).width);
		this.padL = Math.max(PAD.l, Math.ceil(widest) + 12);
		const yOf = (v) => y0 - v / top * (y0 - y1);
		this.yOf = yOf;
		// Grid and y axis.
		ctx.strokeStyle = th.grid;
		ctx.fillStyle = th.text;
		ctx.lineWidth = 1;
		ctx.textAlign = 'right';
		ctx.textBaseline = 'middle';
		for (let v = 0; v <= top + step / 2; v += step) {
			const y = Math.round(yOf(v)) + 0.5;
			ctx.beginPath();
			ctx.moveTo(this.padL, y);
			ctx.lineTo(w - PAD.r, y);
			ctx.stroke();
			ctx.fillText(this.opts.format(v), this.padL - 6, y);
		}
		// x axis.
		const span = d.until - d.from;
		const tstep = TIME_STEPS.find((s) => span / s <= Math.max(2, (w - this.padL) / 90)) ||
			      TIME_STEPS[TIME_STEPS.length - 1];
		const tz = new Date().getTimezoneOffset() * 60e3;
		ctx.textAlign = 'center';
		ctx.textBaseline = 'top';
		ctx.strokeStyle = th.text;
		ctx.beginPath();
		ctx.moveTo(this.padL, y0 + 0.5);
		ctx.lineTo(w - PAD.r, y0 + 0.5);
		ctx.stroke();
		const first = Math.ceil((d.from - tz) / tstep) * tstep + tz;
		for (let t = first; t <= d.until; t += tstep) {
			const x = Math.round(this.xOf(t)) + 0.5;
			const lw = ctx.measureText(fmtTick(t, tstep)).width;
			if (x + lw / 2 > w || x - lw / 2 < this.padL - 20)
				continue;
			ctx.beginPath();
			ctx.moveTo(x, y0);
			ctx.lineTo(x, y0 + 4);
			ctx.stroke();
			ctx.fillText(fmtTick(t, tstep), x, y0 + 6);
		}
		ctx.save();
		ctx.beginPath();
		ctx.rect(this.padL, 0, w - this.padL - PAD.r, h);
		ctx.clip();
		for (const sel of this.selections) {
			const a = this.xOf(sel.from), b = this.xOf(sel.until);
			ctx.fillStyle = sel.color || 'rgba(59,111,216,0.18)';
			ctx.fillRect(a, y1, b - a, y0 - y1);
		}
		d.series.forEach((s, i) => {
			ctx.globalAlpha = this.highlight >= 0 && this.highlight !== i ? 0.2 : 1;
			if (this.opts.kind === 'bars')
				this.drawBars(s, yOf, y0, span);
			else
				this.drawLine(s, yOf, i === this.highlight);
		});
		ctx.globalAlpha = 1;
		if (this.drag) {
			const a = Math.min(this.drag.x0, this.drag.x1), b = Math.max(this.drag.x0, this.drag.x1);
			ctx.fillStyle = 'rgba(59,111,216,0.25)';
			ctx.fillRect(a, y1, b - a, y0 - y1);
		}
		if (this.hoverX >= 0) {
			ctx.strokeStyle = th.ink;
			ctx.beginPath();
			ctx.moveTo(Math.round(this.hoverX) + 0.5, y1);
			ctx.lineTo(Math.round(this.hoverX) + 0.5, y0);
			ctx.stroke();
			for (const { series, point } of this.hovered) {
				ctx.fillStyle = series.color;
				ctx.beginPath();
				ctx.arc(this.xOf(point[0]), yOf(point[1]), 3, 0, 2 * Math.PI);
				ctx.fill();
			}
		}
		ctx.restore();
	}

	drawBars(s, yOf, y0, span) {
		const ctx = this.ctx;
		ctx.fillStyle = s.color;
		const bw = s.step ? s.step / span * (this.w - this.padL - PAD.r) : 2;
		for (const [t, v] of s.points) {
			if (!(v > 0))
				continue;
			const x = this.xOf(t), y = yOf(v);
			ctx.fillRect(x, y, Math.max(1, bw - (bw > 3 ? 1 : 0)), y0 - y);
		}
	}

	// A line through the points, broken where a value is missing or the
	// points are more than 2.5 steps apart (a process not running then); a
	// point alone between breaks is a dot.
	drawLine(s, yOf, bold) {
		const ctx = this.ctx;
		const gap = s.step ? 2.5 * s.step : Infinity;
		ctx.strokeStyle = s.color;
		ctx.fillStyle = s.color;
		ctx.lineWidth = (s.width || 1.5) + (bold ? 1 : 0);
		ctx.setLineDash(s.dash || []);
		ctx.beginPath();
		let prev = null, run = 0;
		const lone = [];
		for (const p of s.points) {
			const [t, v] = p;
			if (v === null || !Number.isFinite(v)) {
				if (run === 1)
					lone.push(prev);
				run = 0;
				continue;
			}
			const x = this.xOf(t), y = yOf(v);
			if (run && t - prev[0] <= gap) {
				ctx.lineTo(x, y);
				run++;
			} else {
				if (run === 1)
					lone.push(prev);
				ctx.moveTo(x, y);
				run = 1;
			}
			prev = p;
		}
		if (run === 1)
			lone.push(prev);
		ctx.stroke();
		ctx.setLineDash([]);
		for (const [t, v] of lone)
			ctx.fillRect(this.xOf(t) - 1.5, yOf(v) - 1.5, 3, 3);
	}

	pos(e) {
		const b = this.canvas.getBoundingClientRect();
		return [e.clientX - b.left, e.clientY - b.top];
	}

	onDown(e) {
		if (!this.opts.selectable || !this.data || e.button !== 0)
			return;
		const [x] = this.pos(e);
		if (x < this.padL)
			return;
		e.preventDefault();
		this.drag = { x0: x, x1: x };
	}

	onMove(e) {
		if (!this.data)
			return;
		const [x] = this.pos(e);
		if (this.drag) {
			this.drag.x1 = Math.min(this.w - PAD.r, Math.max(this.padL, x));
			this.tip.hidden = true;
			this.schedule();
			return;
		}
		if (x < this.padL || x > this.w - PAD.r) {
			this.hoverX = -1;
			this.hovered = [];
			this.tip.hidden = true;
			this.schedule();
			return;
		}
		this.hoverX = x;
		const t = this.tOf(x);
		const near = this.near(t);
		this.hovered = this.opts.kind === 'bars' ? [] : near;
		const rows = near.slice(0, TIP_ROWS).map(({ series: s, point: p }) =>
			`<tr><th><i style="background:${s.color}"></i>${escapeHTML(s.label || '')}` +
			`</th><td>${escapeHTML(this.opts.format(p[1]))}</td></tr>`);
		const more = near.length > TIP_ROWS
			? `<div class="tip-hint">and ${near.length - TIP_ROWS} more</div>` : '';
		this.tip.innerHTML = `<div class="tip-name">${fmtDate(t)}</div>` +
			(rows.length ? `<table>${rows.join('')}</table>${more}`
				: '<div class="tip-empty muted">No data here</div>') +
			(this.opts.selectable ? '<div class="tip-hint">drag to select a range</div>' : '');
		this.tip.hidden = false;
		const tw = this.tip.offsetWidth, tH = this.tip.offsetHeight;
		this.tip.style.left = Math.min(window.innerWidth - tw - 4, e.clientX + 14) + 'px';
		const top = Math.min(window.innerHeight - tH - 4, e.clientY + 14);
		this.tip.style.top = Math.max(4, top) + 'px';
		this.schedule();
	}

	finishDrag() {
		if (!this.drag)
			return;
		const { x0, x1 } = this.drag;
		this.drag = null;
		this.schedule();
		if (Math.abs(x1 - x0) < 3 || !this.opts.onSelect)
			return;
		const a = Math.round(this.tOf(Math.min(x0, x1))), b = Math.round(this.tOf(Math.max(x0, x1)));
		this.opts.onSelect(a, b);
	}
}
