// charts.js: time charts on canvas with axes and units -- the samples-per-
// second timeline (bars; dragging selects a range) and the GPU page's line
// charts (one line per series, with a legend and a hover read-out). Used by
// app.js.

import { fmtTick, fmtDate, escapeHTML } from './format.js';

const PAD = { l: 70, r: 12, t: 10, b: 22 }; // l: the least left margin (padL grows to fit the labels)
const PALETTE = ['#3b6fd8', '#e0692d', '#2f9e5b', '#b0379c', '#c9a100', '#19a3b5', '#d33a3a',
		 '#6b56c9', '#7a8a2a', '#8c5a3c'];
const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600,
		    43200, 86400, 172800, 604800].map((s) => s * 1000);

export function niceStep(x) {
	if (!(x > 0))
		return 1;
	const p = 10 ** Math.floor(Math.log10(x));
	const m = x / p;
	return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10) * p;
}

export class TimeChart {
	// opts: kind 'bars' | 'lines', height, format(v) for the y axis and the
	// read-out, selectable + onSelect(fromMs, untilMs) for drag selection.
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
		this.pending = false;
		this.canvas.addEventListener('mousedown', (e) => this.onDown(e));
		this.canvas.addEventListener('mousemove', (e) => this.onMove(e));
		this.canvas.addEventListener('mouseleave', () => {
			this.hoverX = -1;
			this.tip.hidden = true;
			this.schedule();
		});
		this.onUp = (e) => this.finishDrag(e);
		window.addEventListener('mouseup', this.onUp);
		this.ro = new ResizeObserver(() => this.schedule());
		this.ro.observe(this.wrap);
	}

	destroy() {
		this.ro.disconnect();
		window.removeEventListener('mouseup', this.onUp);
		this.tip.remove();
		this.el.remove();
	}

	// data: {from, until, series: [{label, points: [[ms, v], ...], step}]}
	setData(data) {
		this.data = data;
		data.series.forEach((s, i) => (s.color = s.color || PALETTE[i % PALETTE.length]));
		this.legend.innerHTML = data.series.length > 1 || (data.series[0] && data.series[0].label)
			? data.series.map((s) => `<span><i style="background:${s.color}"></i>` +
					  `${escapeHTML(s.label || '')}</span>`).join('')
			: '';
		const has = data.series.some((s) => s.points.some((p) => p[1] > 0));
		this.empty.hidden = has;
		this.empty.textContent = this.opts.emptyText || 'No data in this range';
		this.schedule();
	}

	// Highlighted ranges: [{from, until, color, label}].
	setSelections(sel) {
		this.selections = sel;
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
		const ctx = this.ctx, d = this.data;
		ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
		ctx.clearRect(0, 0, w, h);
		ctx.font = '11px system-ui, sans-serif';
		const y0 = h - PAD.b, y1 = PAD.t;
		let max = 0;
		for (const s of d.series)
			for (const p of s.points)
				if (p[0] >= d.from && p[0] <= d.until && p[1] > max)
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
		ctx.strokeStyle = '#e6e6ea';
		ctx.fillStyle = '#555';
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
		ctx.strokeStyle = '#999';
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
		for (const s of d.series) {
			if (this.opts.kind === 'bars') {
				ctx.fillStyle = s.color;
				const bw = s.step ? s.step / span * (w - this.padL - PAD.r) : 2;
				for (const [t, v] of s.points) {
					if (!(v > 0))
						continue;
					const x = this.xOf(t), y = yOf(v);
					ctx.fillRect(x, y, Math.max(1, bw - (bw > 3 ? 1 : 0)), y0 - y);
				}
			} else {
				ctx.strokeStyle = s.color;
				ctx.lineWidth = 1.5;
				ctx.beginPath();
				let on = false;
				for (const [t, v] of s.points) {
					if (v === null || !Number.isFinite(v)) {
						on = false;
						continue;
					}
					const x = this.xOf(t), y = yOf(v);
					if (on)
						ctx.lineTo(x, y);
					else
						ctx.moveTo(x, y);
					on = true;
				}
				ctx.stroke();
			}
		}
		if (this.drag) {
			const a = Math.min(this.drag.x0, this.drag.x1), b = Math.max(this.drag.x0, this.drag.x1);
			ctx.fillStyle = 'rgba(59,111,216,0.25)';
			ctx.fillRect(a, y1, b - a, y0 - y1);
		}
		if (this.hoverX >= 0) {
			ctx.strokeStyle = '#333';
			ctx.beginPath();
			ctx.moveTo(Math.round(this.hoverX) + 0.5, y1);
			ctx.lineTo(Math.round(this.hoverX) + 0.5, y0);
			ctx.stroke();
		}
		ctx.restore();
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
			this.tip.hidden = true;
			this.schedule();
			return;
		}
		this.hoverX = x;
		const t = this.tOf(x);
		const rows = [];
		for (const s of this.data.series) {
			let best = null;
			for (const p of s.points) {
				const end = p[0] + (this.opts.kind === 'bars' ? s.step || 0 : 0);
				if (this.opts.kind === 'bars' ? p[0] <= t && t < end : true) {
					if (!best || Math.abs(p[0] - t) < Math.abs(best[0] - t))
						best = p;
				}
			}
			if (best)
				rows.push(`<tr><th><i style="background:${s.color}"></i>${escapeHTML(s.label || '')}` +
					  `</th><td>${escapeHTML(this.opts.format(best[1]))}</td></tr>`);
		}
		this.tip.innerHTML = `<div class="tip-name">${fmtDate(t)}</div><table>${rows.join('')}</table>` +
			(this.opts.selectable ? '<div class="tip-hint">drag to select a range</div>' : '');
		this.tip.hidden = false;
		const tw = this.tip.offsetWidth;
		this.tip.style.left = Math.min(window.innerWidth - tw - 4, e.clientX + 14) + 'px';
		this.tip.style.top = e.clientY + 14 + 'px';
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
