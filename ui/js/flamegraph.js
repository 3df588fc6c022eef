// flamegraph.js: Sonde's flame graph, drawn on a canvas. Shows a FlameModel
// (model.js) as a flame (root at the bottom) or an icicle (root on top); click
// zooms into a node (the breadcrumb and Reset zoom out), hover tells a node's
// self and total, a search greys out what does not match, right-click or
// alt-click asks for the sandwich view of a function, and a diff model is
// coloured by the change of each node's share. Used by app.js (profile, diff
// and sandwich views) and speedscope.js.
//
// It stays smooth on big profiles: at most one draw per animation frame, only
// the rows on screen, only the children of nodes at least a pixel wide, and
// runs of nodes narrower than a pixel merged into one grey rectangle.

import { fmtPct, fmtValue, escapeHTML } from './format.js';

const ROW = 18;
const FONT = '12px ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace';
const MERGED = '#c8c8c8';
const DIMMED = '#e4e4e4';
const STEPS = 20;

function hash(s) {
	let h = 2166136261;
	for (let i = 0; i < s.length; i++) {
		h ^= s.charCodeAt(i);
		h = Math.imul(h, 16777619);
	}
	return h >>> 0;
}

// Frames of one package share a colour, as in Pyroscope: the package is what
// precedes the function name (pkg.Func, ns::func, module+0x1f).
function packageOf(name) {
	const m = /^(.*?)(?:::|\.|\+0x|\/)[^:./]*$/.exec(name);
	return m && m[1] ? m[1] : name;
}

function nameColor(name) {
	if (name === 'total')
		return '#b9b9c8';
	if (name === 'other')
		return MERGED;
	if (name.endsWith('_[k]')) {
		const h = hash(name) % 24;
		return `hsl(${200 + h}, 45%, 70%)`;
	}
	const h = hash(packageOf(name));
	return `hsl(${(h % 55) + 5}, ${60 + (h >> 8) % 25}%, ${58 + (h >> 16) % 14}%)`;
}

function mix(a, b, t) {
	return `rgb(${a.map((v, i) => Math.round(v + (b[i] - v) * t)).join(',')})`;
}

const NEUTRAL = [214, 214, 214], RED = [226, 45, 45], GREEN = [40, 168, 72];
export const DIFF_RED = Array.from({ length: STEPS + 1 }, (_, i) => mix(NEUTRAL, RED, i / STEPS));
export const DIFF_GREEN = Array.from({ length: STEPS + 1 }, (_, i) => mix(NEUTRAL, GREEN, i / STEPS));

export class FlameGraph {
	// host: the element to fill. opts.onSandwich(name): right-click/alt-click
	// on a node; opts.onZoom(): the zoom changed; opts.order: 'flame' layout
	// name shown in the breadcrumb.
	constructor(host, opts = {}) {
		this.opts = opts;
		this.el = document.createElement('div');
		this.el.className = 'flame';
		this.crumbs = document.createElement('div');
		this.crumbs.className = 'crumbs';
		this.canvas = document.createElement('canvas');
		this.canvas.className = 'flame-canvas';
		this.tip = document.createElement('div');
		this.tip.className = 'tooltip';
		this.tip.hidden = true;
		this.el.append(this.crumbs, this.canvas);
		document.body.append(this.tip);
		host.append(this.el);
		this.ctx = this.canvas.getContext('2d');
		this.model = null;
		this.orientation = opts.orientation || 'icicle';
		this.zoom = 0;
		this.hover = -1;
		this.matched = null;
		this.pending = false;
		this.width = 0;
		this.height = 0;
		this.dpr = 1;
		this.drawTimes = [];
		this.draws = 0;
		this.rec = { n: 0, idx: new Int32Array(1024), x: new Float32Array(1024),
			     y: new Float32Array(1024), w: new Float32Array(1024) };
		this.canvas.addEventListener('mousemove', (e) => this.onMove(e));
		this.canvas.addEventListener('mouseleave', () => this.setHover(-1));
		this.canvas.addEventListener('click', (e) => this.onClick(e));
		this.canvas.addEventListener('contextmenu', (e) => this.onContext(e));
		this.ro = new ResizeObserver(() => this.schedule());
		this.ro.observe(this.el);
		this.onScroll = () => this.schedule();
		window.addEventListener('scroll', this.onScroll, { passive: true });
		window.addEventListener('resize', this.onScroll);
	}

	destroy() {
		this.ro.disconnect();
		window.removeEventListener('scroll', this.onScroll);
		window.removeEventListener('resize', this.onScroll);
		this.tip.remove();
		this.el.remove();
	}

	setModel(m) {
		this.model = m;
		this.zoom = 0;
		this.hover = -1;
		this.matched = null;
		this.colors = null;
		if (m)
			this.prepareColors();
		this.renderCrumbs();
		this.schedule();
	}

	prepareColors() {
		const m = this.model;
		this.nameColors = m.names.map(nameColor);
		if (!m.diff)
			return;
		// Each node's change of share, right minus left, scaled by the
		// largest change so that the worst regression is the reddest.
		const { lTotal, rTotal, leftTicks, rightTicks } = m.diff;
		const delta = new Float64Array(m.n);
		let maxAbs = 0;
		for (let i = 0; i < m.n; i++) {
			const l = leftTicks ? lTotal[i] / leftTicks : 0;
			const r = rightTicks ? rTotal[i] / rightTicks : 0;
			delta[i] = r - l;
			maxAbs = Math.max(maxAbs, Math.abs(delta[i]));
		}
		this.delta = delta;
		this.maxDelta = maxAbs;
		this.diffColors = new Array(m.n);
		for (let i = 0; i < m.n; i++) {
			const t = maxAbs ? Math.sqrt(Math.abs(delta[i]) / maxAbs) : 0;
			const step = Math.round(t * STEPS);
			this.diffColors[i] = delta[i] > 0 ? DIFF_RED[step] : DIFF_GREEN[step];
		}
	}

	// The colour node i is drawn with.
	colorOf(i) {
		if (this.matched && !this.matched[i] && i !== 0)
			return DIMMED;
		if (this.model.diff)
			return this.diffColors[i];
		return this.nameColors[this.model.name[i]];
	}

	setOrientation(o) {
		this.orientation = o === 'flame' ? 'flame' : 'icicle';
		this.schedule();
	}

	// Highlights the nodes matched (a Uint8Array from model.search), or
	// none with null.
	setMatched(matched) {
		this.matched = matched;
		this.schedule();
	}

	zoomTo(i) {
		if (!this.model || i < 0 || i >= this.model.n)
			return;
		this.zoom = i;
		this.renderCrumbs();
		this.schedule();
		if (this.opts.onZoom)
			this.opts.onZoom(i);
	}

	reset() {
		this.zoomTo(0);
	}

	renderCrumbs() {
		const m = this.model;
		this.crumbs.textContent = '';
		if (!m || !m.n)
			return;
		const chain = [];
		for (let a = this.zoom; a >= 0; a = m.parent[a])
			chain.unshift(a);
		const reset = document.createElement('button');
		reset.textContent = 'Reset zoom';
		reset.className = 'small';
		reset.disabled = this.zoom === 0;
		reset.addEventListener('click', () => this.reset());
		this.crumbs.append(reset);
		chain.forEach((a, k) => {
			if (k)
				this.crumbs.append(' › ');
			const b = document.createElement('a');
			b.href = '#';
			b.textContent = m.nameOf(a);
			b.title = m.nameOf(a);
			b.addEventListener('click', (e) => {
				e.preventDefault();
				this.zoomTo(a);
			});
			this.crumbs.append(b);
		});
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

	rowY(d) {
		const L = this.model.levels;
		return (this.orientation === 'icicle' ? d : L - 1 - d) * ROW;
	}

	resize() {
		const w = Math.max(100, this.el.clientWidth);
		const h = Math.max(ROW, (this.model ? this.model.levels : 1) * ROW);
		const dpr = window.devicePixelRatio || 1;
		if (w !== this.width || h !== this.height || dpr !== this.dpr) {
			this.width = w;
			this.height = h;
			this.dpr = dpr;
			this.canvas.width = Math.round(w * dpr);
			this.canvas.height = Math.round(h * dpr);
			this.canvas.style.width = w + 'px';
			this.canvas.style.height = h + 'px';
		}
	}

	record(i, x, y, w) {
		const r = this.rec;
		if (r.n === r.idx.length) {
			const grow = (a, T) => {
				const b = new T(a.length * 2);
				b.set(a);
				return b;
			};
			r.idx = grow(r.idx, Int32Array);
			r.x = grow(r.x, Float32Array);
			r.y = grow(r.y, Float32Array);
			r.w = grow(r.w, Float32Array);
		}
		r.idx[r.n] = i;
		r.x[r.n] = x;
		r.y[r.n] = y;
		r.w[r.n] = w;
		r.n++;
	}

	// Draws the rows on screen, or with all every row (for a picture).
	draw(all = false) {
		const t0 = performance.now();
		const m = this.model;
		this.rec.n = 0;
		if (!m || !m.n || !this.el.isConnected)
			return;
		this.resize();
		const ctx = this.ctx, W = this.width;
		ctx.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
		ctx.clearRect(0, 0, W, this.height);
		ctx.font = FONT;
		ctx.textBaseline = 'middle';
		if (!this.charW)
			this.charW = ctx.measureText('mmmmmmmmmm').width / 10;
		// Only the rows inside the window are drawn.
		const box = this.canvas.getBoundingClientRect();
		const vy0 = all ? 0 : Math.max(0, -box.top);
		const vy1 = all ? this.height : Math.min(this.height, window.innerHeight - box.top);
		const z = this.zoom, x0 = m.start[z], span = m.total[z] || 1, xEnd = x0 + span;
		const k = W / span;
		const zd = m.depth[z];
		const ancestors = [];
		for (let a = z; a >= 0; a = m.parent[a])
			ancestors[m.depth[a]] = a;
		let lastFill = '';
		const fill = (c) => {
			if (c !== lastFill) {
				ctx.fillStyle = c;
				lastFill = c;
			}
		};
		const label = (i, px, y, pw) => {
			const chars = Math.floor((pw - 6) / this.charW);
			if (chars < 2)
				return;
			let s = m.nameOf(i);
			if (s.length > chars)
				s = s.slice(0, chars - 1) + '…';
			fill('#1d1d28');
			ctx.fillText(s, px + 3, y + ROW / 2 + 0.5);
		};
		for (let d = 0; d < zd; d++) {
			const y = this.rowY(d);
			if (y + ROW < vy0 || y > vy1)
				continue;
			// Ancestors of the zoomed node span the width, faded.
			const a = ancestors[d];
			ctx.globalAlpha = 0.55;
			fill(this.colorOf(a));
			ctx.fillRect(0, y, W - 1, ROW - 1);
			ctx.globalAlpha = 1;
			label(a, 0, y, W);
			this.record(a, 0, y, W);
		}
		// From the zoomed node down, only the children of nodes at least a
		// pixel wide are visited: what lies under a merged sliver is not
		// drawn, so a frame costs what is visible, not the profile's size.
		let wide = this.wideA || (this.wideA = new Int32Array(1024));
		let next = this.wideB || (this.wideB = new Int32Array(1024));
		wide[0] = z;
		let nWide = 1;
		for (let d = zd; d < m.levels && nWide; d++) {
			const y = this.rowY(d);
			const visible = y + ROW >= vy0 && y <= vy1;
			let nNext = 0, runX = -1, runEnd = -1;
			const flush = () => {
				if (runX >= 0 && runEnd - runX >= 1 && visible) {
					fill(MERGED);
					ctx.fillRect(runX, y, runEnd - runX, ROW - 1);
					this.record(-1, runX, y, runEnd - runX);
				}
				runX = -1;
			};
			for (let w = 0; w < nWide; w++) {
				const p = wide[w];
				const first = d === zd ? p : m.childFirst[p];
				const last = d === zd ? p + 1 : first + m.childCount[p];
				for (let i = first; i < last; i++) {
					const px = (m.start[i] - x0) * k, pw = m.total[i] * k;
					if (pw < 1) {
						if (runX >= 0 && px <= runEnd + 0.5) {
							runEnd = Math.max(runEnd, px + pw);
						} else {
							flush();
							runX = px;
							runEnd = px + pw;
						}
						continue;
					}
					flush();
					if (nNext === next.length) {
						const g = new Int32Array(next.length * 2);
						g.set(next);
						next = g;
					}
					next[nNext++] = i;
					if (!visible)
						continue;
					fill(this.colorOf(i));
					ctx.fillRect(px, y, pw > 2 ? pw - 1 : pw, ROW - 1);
					this.record(i, px, y, pw);
					if (pw > 2 * this.charW + 6)
						label(i, px, y, pw);
				}
			}
			flush();
			[wide, next] = [next, wide];
			nWide = nNext;
		}
		this.wideA = wide;
		this.wideB = next;
		if (this.hover >= 0) {
			const r = this.rectOf(this.hover);
			if (r) {
				ctx.strokeStyle = '#111';
				ctx.lineWidth = 1.5;
				ctx.strokeRect(r.x + 0.75, r.y + 0.75, Math.max(1, r.w - 2), ROW - 2.5);
			}
		}
		this.draws++;
		const dt = performance.now() - t0;
		this.drawTimes.push(dt);
		if (this.drawTimes.length > 600)
			this.drawTimes.shift();
	}

	// Where node i is drawn, in CSS pixels of the canvas, or null.
	rectOf(i) {
		const m = this.model;
		if (!m || i < 0 || i >= m.n)
			return null;
		const z = this.zoom, k = this.width / (m.total[z] || 1);
		if (m.depth[i] < m.depth[z])
			return { x: 0, y: this.rowY(m.depth[i]), w: this.width };
		return { x: (m.start[i] - m.start[z]) * k, y: this.rowY(m.depth[i]), w: m.total[i] * k };
	}

	// The node under (x, y) CSS pixels of the canvas, or -1.
	hit(x, y) {
		const m = this.model;
		if (!m || !m.n || x < 0 || x >= this.width || y < 0)
			return -1;
		const row = Math.floor(y / ROW);
		const d = this.orientation === 'icicle' ? row : m.levels - 1 - row;
		if (d < 0 || d >= m.levels)
			return -1;
		const z = this.zoom;
		if (d < m.depth[z]) {
			let a = z;
			while (m.depth[a] > d)
				a = m.parent[a];
			return a;
		}
		const k = this.width / (m.total[z] || 1);
		const i = m.nodeAt(d, m.start[z] + x / k);
		if (i < 0 || m.total[i] * k < 1)
			return -1;
		const s = m.start[z], e = s + m.total[z];
		return m.start[i] < e && m.start[i] + m.total[i] > s ? i : -1;
	}

	setHover(i, ev) {
		if (i !== this.hover) {
			this.hover = i;
			this.schedule();
		}
		if (i < 0) {
			this.tip.hidden = true;
			this.canvas.style.cursor = '';
			return;
		}
		this.canvas.style.cursor = 'pointer';
		this.tip.innerHTML = this.tooltipHTML(i);
		this.tip.hidden = false;
		if (ev) {
			const tw = this.tip.offsetWidth, th = this.tip.offsetHeight;
			let x = ev.clientX + 14, y = ev.clientY + 14;
			if (x + tw > window.innerWidth - 4)
				x = Math.max(4, ev.clientX - tw - 14);
			if (y + th > window.innerHeight - 4)
				y = Math.max(4, ev.clientY - th - 14);
			this.tip.style.left = x + 'px';
			this.tip.style.top = y + 'px';
		}
	}

	tooltipHTML(i) {
		const m = this.model, u = m.unit;
		const row = (k, v) => `<tr><th>${k}</th><td>${v}</td></tr>`;
		let h = `<div class="tip-name">${escapeHTML(m.nameOf(i))}</div>`;
		const src = m.sourceOf(i);
		if (src)
			h += `<div class="tip-source">${escapeHTML(src)}</div>`;
		h += '<table>';
		if (m.diff) {
			const D = m.diff;
			const l = D.leftTicks ? D.lTotal[i] / D.leftTicks : 0;
			const r = D.rightTicks ? D.rTotal[i] / D.rightTicks : 0;
			const pp = (r - l) * 100;
			h += row('Baseline', `${fmtValue(D.lTotal[i], u)} (${fmtPct(l)})`);
			h += row('Comparison', `${fmtValue(D.rTotal[i], u)} (${fmtPct(r)})`);
			h += row('Change', `<span class="${pp > 0 ? 'worse' : pp < 0 ? 'better' : ''}">` +
				 `${pp > 0 ? '+' : ''}${pp.toFixed(2)} pp</span>`);
			h += row('Self', `${fmtValue(D.lSelf[i], u)} → ${fmtValue(D.rSelf[i], u)}`);
		} else {
			const T = m.numTicks || 1;
			h += row('Total', `${fmtValue(m.total[i], u)} (${fmtPct(m.total[i] / T)})`);
			h += row('Self', `${fmtValue(m.self[i], u)} (${fmtPct(m.self[i] / T)})`);
			if (this.zoom)
				h += row('Of zoomed', fmtPct(m.total[i] / (m.total[this.zoom] || 1)));
		}
		h += '</table><div class="tip-hint">click: zoom · right-click: sandwich</div>';
		return h;
	}

	pos(e) {
		const b = this.canvas.getBoundingClientRect();
		return [e.clientX - b.left, e.clientY - b.top];
	}

	onMove(e) {
		const [x, y] = this.pos(e);
		this.setHover(this.hit(x, y), e);
	}

	onClick(e) {
		const [x, y] = this.pos(e);
		const i = this.hit(x, y);
		if (i < 0)
			return;
		if (e.altKey) {
			this.onContext(e);
			return;
		}
		this.zoomTo(i === this.zoom && i ? this.model.parent[i] : i);
	}

	onContext(e) {
		const [x, y] = this.pos(e);
		const i = this.hit(x, y);
		if (i <= 0 || !this.opts.onSandwich)
			return;
		e.preventDefault();
		this.tip.hidden = true;
		this.opts.onSandwich(this.model.nameOf(i));
	}

	// For tests and tools: what the last draw put on the canvas, in CSS
	// pixels (merged runs of tiny nodes have name null).
	rects() {
		const r = this.rec, m = this.model, out = [];
		for (let j = 0; j < r.n; j++) {
			const i = r.idx[j];
			out.push({
				name: i >= 0 ? m.nameOf(i) : null, node: i, x: r.x[j], y: r.y[j], w: r.w[j], h: ROW,
				total: i >= 0 ? m.total[i] : 0, self: i >= 0 ? m.self[i] : 0,
				color: i >= 0 ? this.colorOf(i) : MERGED,
			});
		}
		return out;
	}
}
