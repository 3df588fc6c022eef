// flamegraph.js: Sonde's flame graph, drawn on a canvas. Shows a FlameModel
// (model.js) as a flame (root at the bottom) or an icicle (root on top); click
// zooms into a node (the breadcrumb and Reset zoom out; zoomPath/zoomTo give
// the zoom as a path of names, for the URL), hover tells a node's self, total,
// source and module, a search greys out what does not match, right-click opens
// a node's menu (zoom, focus, hide, collapse, sandwich, copy name: the view
// does what the callbacks say), alt-click asks for the sandwich view, and a
// diff model is coloured by the change of each node's share. Frames are
// coloured by package (their name's prefix) or by module. The keyboard does
// it all too: the canvas takes the focus, arrows move between nodes, Enter
// zooms, the menu key or Shift+F10 opens the menu. Its colours follow the
// page's theme (CSS variables --ink, --panel, --muted, --line, read again on
// the window's 'sonde-theme' event). Used by app.js (profile, diff and
// sandwich views) and speedscope.js.
//
// It stays smooth on big profiles: at most one draw per animation frame, only
// the rows on screen, only the children of nodes at least a pixel wide, and
// runs of nodes narrower than a pixel merged into one grey rectangle.

import { fmtPct, fmtValue, escapeHTML } from './format.js';
import { pathOf, findPath } from './model.js';

const ROW = 18;
const FONT = '12px ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace';
const MERGED = '#c8c8c8';
const DIMMED = '#e4e4e4';
const LABEL = '#1d1d28';
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

// On a dark page the frames are darker (dk: lightness taken off) and
// their labels light.
function nameColor(name, dk = 0) {
	if (name === 'total')
		return dk ? '#4a4a5c' : '#b9b9c8';
	if (name === 'other')
		return dk ? '#555560' : MERGED;
	if (name.endsWith('_[k]')) {
		const h = hash(name) % 24;
		return `hsl(${200 + h}, 45%, ${70 - dk}%)`;
	}
	const h = hash(packageOf(name));
	return `hsl(${(h % 55) + 5}, ${60 + (h >> 8) % 25}%, ${58 - dk + (h >> 16) % 14}%)`;
}

// The module a frame is coloured by and its tooltip names: the server's
// (the executable or library, its basename), else for a Python frame its
// file ("step (model.py)" at /app/model.py:42 is in model.py).
function moduleOfName(m, k) {
	const mod = m.modules && m.modules[k];
	if (mod)
		return mod;
	const src = (m.sources && m.sources[k]) || '';
	const file = /([^/]+\.py)(?::\d+)?$/.exec(src) || /\(([^()]*\.py)\)$/.exec(m.names[k]);
	return file ? file[1].replace(/^.*\//, '') : '';
}

// A colour per module, distinct for up to 36 of them: each takes the hue
// its name hashes to, or the next one free, in the modules' name order.
function moduleColors(mods, dk = 0) {
	const taken = new Set(), out = new Map();
	for (const mod of [...mods].sort()) {
		let b = hash(mod) % 36;
		for (let k = 0; k < 36 && taken.has(b); k++)
			b = (b + 1) % 36;
		taken.add(b);
		out.set(mod, `hsl(${b * 10}, ${55 + hash(mod + '.') % 20}%, ${66 - dk}%)`);
	}
	return out;
}

// A CSS colour as [r, g, b], through the canvas's own parser; null if it
// is none.
function rgbOf(ctx, c) {
	if (!c)
		return null;
	ctx.fillStyle = '#010203';
	ctx.fillStyle = c;
	const v = ctx.fillStyle;
	if (v === '#010203' && c.replace(/\s/g, '') !== '#010203')
		return null;
	const hex = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(v);
	if (hex)
		return hex.slice(1).map((x) => parseInt(x, 16));
	const rgb = /rgba?\((\d+),\s*(\d+),\s*(\d+)/.exec(v);
	return rgb ? rgb.slice(1, 4).map(Number) : null;
}

function mix(a, b, t) {
	return `rgb(${a.map((v, i) => Math.round(v + (b[i] - v) * t)).join(',')})`;
}

const NEUTRAL = [214, 214, 214], RED = [226, 45, 45], GREEN = [40, 168, 72];
const NEUTRAL_DARK = [74, 74, 84];
const ramp = (a, b) => Array.from({ length: STEPS + 1 }, (_, i) => mix(a, b, i / STEPS));
export const DIFF_RED = ramp(NEUTRAL, RED);
export const DIFF_GREEN = ramp(NEUTRAL, GREEN);
const DIFF_RED_DARK = ramp(NEUTRAL_DARK, RED);
const DIFF_GREEN_DARK = ramp(NEUTRAL_DARK, GREEN);

// The node menu's items: [action, label, the callback it needs].
const MENU = [['zoom', 'Zoom', null], ['focus', 'Focus on this function', 'onFocus'],
	['hide', 'Hide this function', 'onHide'], ['collapse', 'Collapse', 'onCollapse'],
	['sandwich', 'Sandwich view (callers and callees)', 'onSandwich'], ['copy', 'Copy name', null]];

export class FlameGraph {
	// host: the element to fill. opts: orientation 'icicle' (default) or
	// 'flame'; colorBy 'package' (default) or 'module'; the node menu's
	// callbacks, each given the function's name (an item shows only when its
	// callback is given): onFocus, onHide, onCollapse, onSandwich (also
	// alt-click); onZoom(path): the zoom changed, path as zoomPath() gives it.
	constructor(host, opts = {}) {
		this.opts = opts;
		this.el = document.createElement('div');
		this.el.className = 'flame';
		this.crumbs = document.createElement('div');
		this.crumbs.className = 'crumbs';
		this.canvas = document.createElement('canvas');
		this.canvas.className = 'flame-canvas';
		this.canvas.tabIndex = 0;
		this.canvas.setAttribute('role', 'application');
		this.canvas.setAttribute('aria-roledescription', 'flame graph');
		this.canvas.setAttribute('aria-label', 'Flame graph: arrow keys move between frames, Enter ' +
			'zooms, the menu key or Shift+F10 opens the frame\'s menu');
		this.tip = document.createElement('div');
		this.tip.className = 'tooltip';
		this.tip.hidden = true;
		// What the keyboard selected, said to screen readers.
		this.live = document.createElement('div');
		this.live.setAttribute('aria-live', 'polite');
		this.live.style.cssText = 'position:absolute;width:1px;height:1px;overflow:hidden;' +
			'clip:rect(0 0 0 0);white-space:nowrap';
		this.menu = document.createElement('div');
		this.menu.className = 'flame-menu';
		this.menu.setAttribute('role', 'menu');
		this.menu.hidden = true;
		this.menu.style.cssText = 'position:fixed;z-index:20;display:flex;flex-direction:column;' +
			'min-width:14em;padding:4px 0;background:var(--panel,#fff);color:var(--ink,#1d1d28);' +
			'border:1px solid var(--line,#bbb);border-radius:4px;box-shadow:0 2px 8px rgba(0,0,0,.25)';
		this.el.append(this.crumbs, this.canvas, this.live);
		document.body.append(this.tip, this.menu);
		host.append(this.el);
		this.ctx = this.canvas.getContext('2d');
		this.model = null;
		this.orientation = opts.orientation || 'icicle';
		this.colorBy = opts.colorBy === 'module' ? 'module' : 'package';
		this.zoom = 0;
		this.sel = -1;
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
		this.canvas.addEventListener('keydown', (e) => this.onKey(e));
		// Focused by the keyboard (not by a click): the zoomed node is selected.
		this.canvas.addEventListener('mousedown', () => (this.pointerDown = true));
		this.canvas.addEventListener('focus', () => {
			const byPointer = this.pointerDown;
			this.pointerDown = false;
			if (this.sel < 0 && this.model && this.model.n && !byPointer)
				this.select(this.zoom);
		});
		this.canvas.addEventListener('blur', () => {
			if (this.sel >= 0 && this.menu.hidden) {
				this.sel = -1;
				this.setHover(-1);
			}
		});
		this.menu.addEventListener('keydown', (e) => this.onMenuKey(e));
		this.onDocDown = (e) => {
			if (!this.menu.hidden && !this.menu.contains(e.target))
				this.closeMenu(false);
		};
		document.addEventListener('mousedown', this.onDocDown, true);
		this.ro = new ResizeObserver(() => this.schedule());
		this.ro.observe(this.el);
		this.onScroll = () => {
			this.closeMenu(false);
			this.schedule();
		};
		window.addEventListener('scroll', this.onScroll, { passive: true });
		window.addEventListener('resize', this.onScroll);
		this.onTheme = () => {
			this.readTheme();
			if (this.model)
				this.prepareColors();
			this.schedule();
		};
		window.addEventListener('sonde-theme', this.onTheme);
		this.readTheme();
	}

	destroy() {
		this.ro.disconnect();
		window.removeEventListener('scroll', this.onScroll);
		window.removeEventListener('resize', this.onScroll);
		window.removeEventListener('sonde-theme', this.onTheme);
		document.removeEventListener('mousedown', this.onDocDown, true);
		this.tip.remove();
		this.menu.remove();
		this.el.remove();
	}

	// The page's colours (CSS variables on the canvas): the theme is dark
	// when the panel is. this.palette holds what the frames are drawn with.
	readTheme() {
		const cs = getComputedStyle(this.canvas);
		const v = (k) => cs.getPropertyValue(k).trim();
		const panel = rgbOf(this.ctx, v('--panel'));
		const dark = !!panel && 0.2126 * panel[0] + 0.7152 * panel[1] + 0.0722 * panel[2] < 110;
		const ink = v('--ink') || LABEL;
		this.palette = {
			dark, ink, panel: v('--panel'), muted: v('--muted'), line: v('--line'),
			text: dark ? ink : LABEL,
			dim: dark ? v('--line') || '#33333d' : DIMMED,
			merged: dark ? v('--muted') || '#6b6b7a' : MERGED,
			stroke: dark ? ink : '#111',
		};
	}

	setModel(m) {
		this.closeMenu(false);
		this.model = m;
		this.zoom = 0;
		this.sel = -1;
		this.hover = -1;
		this.matched = null;
		this.colors = null;
		if (m)
			this.prepareColors();
		this.renderCrumbs();
		this.schedule();
	}

	prepareColors() {
		const m = this.model, dk = this.palette.dark ? 24 : 0;
		this.nameModules = m.names.map((_, k) => moduleOfName(m, k));
		if (this.colorBy === 'module') {
			const colors = moduleColors(new Set(this.nameModules.filter(Boolean)), dk);
			this.moduleColors = colors;
			this.nameColors = m.names.map((n, k) => (n === 'other' || n === 'total' ||
				!this.nameModules[k] ? nameColor(n === 'other' ? n : 'total', dk)
				: colors.get(this.nameModules[k])));
		} else {
			this.moduleColors = null;
			this.nameColors = m.names.map((n) => nameColor(n, dk));
		}
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
		// opts.diffScale (a share, e.g. 0.1 for 10 points): the change drawn
		// fully red or green, larger ones clamped to it, so that noise does
		// not look saturated; else the largest change.
		const scale = this.opts.diffScale > 0 ? this.opts.diffScale : maxAbs;
		this.diffScale = scale;
		this.diffColors = new Array(m.n);
		for (let i = 0; i < m.n; i++) {
			const t = scale ? Math.sqrt(Math.min(1, Math.abs(delta[i]) / scale)) : 0;
			const step = Math.round(t * STEPS);
			this.diffColors[i] = this.palette.dark
				? (delta[i] > 0 ? DIFF_RED_DARK[step] : DIFF_GREEN_DARK[step])
				: (delta[i] > 0 ? DIFF_RED[step] : DIFF_GREEN[step]);
		}
	}

	// The colour node i is drawn with.
	colorOf(i) {
		if (this.matched && !this.matched[i] && i !== 0)
			return this.palette.dim;
		if (this.model.diff)
			return this.diffColors[i];
		return this.nameColors[this.model.name[i]];
	}

	// 'package' (a frame's colour from its name's prefix) or 'module'.
	setColorBy(c) {
		this.colorBy = c === 'module' ? 'module' : 'package';
		if (this.model)
			this.prepareColors();
		this.schedule();
	}

	// The module of node i's function ('' unknown): the server's, or a
	// Python frame's file.
	moduleOf(i) {
		return this.nameModules ? this.nameModules[this.model.name[i]] || '' : '';
	}

	// When coloured by module: [{module, color}] by module name, for a
	// legend; else [].
	moduleLegend() {
		return this.moduleColors ? [...this.moduleColors].sort((a, b) => (a[0] < b[0] ? -1 : 1))
			.map(([module, color]) => ({ module, color })) : [];
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

	// Zooms to a node: its index, or its path (zoomPath's form). Returns
	// whether there is such a node. opts.onZoom is told of a change, unless
	// notify is false (a view restoring the zoom from its URL).
	zoomTo(target, notify = true) {
		const m = this.model;
		const i = Array.isArray(target) ? (m ? findPath(m, target) : -1) : target;
		if (!m || !Number.isInteger(i) || i < 0 || i >= m.n)
			return false;
		const changed = i !== this.zoom;
		this.zoom = i;
		this.renderCrumbs();
		this.schedule();
		if (changed && notify && this.opts.onZoom)
			this.opts.onZoom(this.zoomPath());
		return true;
	}

	// The zoomed node's path: the names from the root's child down to it
	// (model.js pathOf), or null when not zoomed.
	zoomPath() {
		return this.model && this.zoom > 0 ? pathOf(this.model, this.zoom) : null;
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
			fill(this.palette.text);
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
					fill(this.palette.merged);
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
		for (const i of new Set([this.hover, this.sel])) {
			const r = i >= 0 && this.rectOf(i);
			if (r) {
				ctx.strokeStyle = this.palette.stroke;
				ctx.lineWidth = 1.5;
				ctx.setLineDash(i === this.sel && i !== this.hover ? [3, 2] : []);
				ctx.strokeRect(r.x + 0.75, r.y + 0.75, Math.max(1, r.w - 2), ROW - 2.5);
			}
		}
		ctx.setLineDash([]);
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

	// Shows node i's tooltip (none for -1) by the pointer (ev: clientX and
	// clientY).
	setHover(i, ev) {
		if (i !== this.hover) {
			this.hover = i;
			this.schedule();
		}
		if (i < 0 || !this.menu.hidden) {
			this.tip.hidden = true;
			this.canvas.style.cursor = i < 0 ? '' : 'pointer';
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
		const mod = i > 0 ? this.moduleOf(i) : '';
		if (mod)
			h += row('Module', escapeHTML(mod));
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
		h += '</table><div class="tip-hint">click: zoom · right-click: menu' +
			(this.opts.onSandwich ? ' · alt-click: sandwich' : '') + '</div>';
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
			if (i > 0 && this.opts.onSandwich) {
				this.tip.hidden = true;
				this.opts.onSandwich(this.model.nameOf(i));
			}
			return;
		}
		this.sel = -1;
		this.zoomTo(i === this.zoom && i ? this.model.parent[i] : i);
	}

	onContext(e) {
		const [x, y] = this.pos(e);
		const i = this.hit(x, y);
		if (i <= 0)
			return;
		e.preventDefault();
		this.openMenu(i, e.clientX, e.clientY, false);
	}

	// ---- the node menu ------------------------------------------------------------

	// Opens node i's menu at (cx, cy) in the window, its first item focused;
	// byKey: opened from the keyboard, which gets the canvas back after.
	openMenu(i, cx, cy, byKey = true) {
		const m = this.model;
		if (!m || i <= 0 || i >= m.n)
			return;
		this.menuNode = i;
		this.menuReturn = byKey;
		this.tip.hidden = true;
		const name = m.nameOf(i);
		this.menu.textContent = '';
		this.menu.setAttribute('aria-label', 'Frame ' + name);
		const head = document.createElement('div');
		head.textContent = name;
		head.title = name;
		head.style.cssText = 'padding:2px 10px 4px;font:600 12px ui-monospace,monospace;' +
			'max-width:40em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;' +
			'border-bottom:1px solid var(--line,#ddd);margin-bottom:2px';
		this.menu.append(head);
		for (const [action, label, cb] of MENU) {
			if (cb && !this.opts[cb])
				continue;
			const b = document.createElement('button');
			b.type = 'button';
			b.setAttribute('role', 'menuitem');
			b.tabIndex = -1;
			b.dataset.action = action;
			b.textContent = action === 'zoom' && i === this.zoom ? 'Zoom out' : label;
			b.style.cssText = 'display:block;width:100%;text-align:left;border:0;border-radius:0;' +
				'background:none;color:inherit;padding:4px 10px;font:inherit;cursor:pointer';
			b.addEventListener('mouseenter', () => b.focus({ preventScroll: true }));
			b.addEventListener('focus', () => (b.style.background = 'var(--line,#e8e8ee)'));
			b.addEventListener('blur', () => (b.style.background = 'none'));
			b.addEventListener('click', () => this.menuAction(action));
			this.menu.append(b);
		}
		this.menu.hidden = false;
		const w = this.menu.offsetWidth, h = this.menu.offsetHeight;
		this.menu.style.left = Math.max(4, Math.min(cx, window.innerWidth - w - 4)) + 'px';
		this.menu.style.top = Math.max(4, Math.min(cy, window.innerHeight - h - 4)) + 'px';
		this.menu.querySelector('[role=menuitem]').focus({ preventScroll: true });
	}

	// Closes the menu; refocus: give the focus back to the canvas when the
	// keyboard opened it.
	closeMenu(refocus = true) {
		if (this.menu.hidden)
			return;
		this.menu.hidden = true;
		if (refocus && this.menuReturn)
			this.canvas.focus({ preventScroll: true });
	}

	menuAction(action) {
		const m = this.model, i = this.menuNode;
		this.closeMenu();
		if (!m || i === undefined || i <= 0 || i >= m.n)
			return;
		const name = m.nameOf(i);
		const cb = (MENU.find(([a]) => a === action) || [])[2];
		if (action === 'zoom')
			this.zoomTo(i === this.zoom ? m.parent[i] : i);
		else if (action === 'copy')
			this.copy(name);
		else if (cb && this.opts[cb])
			this.opts[cb](name);
	}

	// Puts text on the clipboard (this.copied says what was put last).
	copy(text) {
		this.copied = text;
		const fallback = () => {
			const t = document.createElement('textarea');
			t.value = text;
			t.style.cssText = 'position:fixed;left:-1000px;top:0';
			document.body.append(t);
			t.select();
			try {
				document.execCommand('copy');
			} catch (e) {
				// nothing more to try
			}
			t.remove();
		};
		if (navigator.clipboard && window.isSecureContext)
			navigator.clipboard.writeText(text).catch(fallback);
		else
			fallback();
	}

	onMenuKey(e) {
		const items = [...this.menu.querySelectorAll('[role=menuitem]')];
		const k = items.indexOf(document.activeElement);
		let to = -1;
		if (e.key === 'ArrowDown')
			to = (k + 1) % items.length;
		else if (e.key === 'ArrowUp')
			to = (k - 1 + items.length) % items.length;
		else if (e.key === 'Home')
			to = 0;
		else if (e.key === 'End')
			to = items.length - 1;
		else if (e.key === 'Escape' || e.key === 'Tab')
			this.closeMenu();
		else
			return;
		e.preventDefault();
		if (to >= 0)
			items[to].focus({ preventScroll: true });
	}

	// ---- the keyboard -------------------------------------------------------------

	// Selects node i (-1: none) as the keyboard's: outlined, its tooltip
	// shown beside it, its name said to screen readers.
	select(i) {
		const m = this.model;
		this.sel = i;
		if (i < 0 || !m) {
			this.setHover(-1);
			return;
		}
		this.schedule();
		const r = this.rectOf(i);
		const box = this.canvas.getBoundingClientRect();
		if (r) {
			const top = box.top + r.y;
			if (top < 0 || top + ROW > window.innerHeight)
				window.scrollBy(0, top < 0 ? top - ROW : top + 2 * ROW - window.innerHeight);
		}
		const b2 = this.canvas.getBoundingClientRect();
		this.setHover(i, r ? { clientX: b2.left + r.x + Math.min(r.w, 40), clientY: b2.top + r.y + ROW }
			: null);
		this.live.textContent = `${m.nameOf(i)}: ${fmtPct(m.total[i] / (m.numTicks || 1))}`;
	}

	// Whether node i is drawn at least a pixel wide inside the zoom.
	shown(i) {
		const m = this.model, z = this.zoom;
		if (m.depth[i] <= m.depth[z])
			return i === z || m.depth[i] < m.depth[z] && m.start[i] <= m.start[z] &&
				m.start[i] + m.total[i] >= m.start[z] + m.total[z];
		return m.start[i] >= m.start[z] && m.start[i] + m.total[i] <= m.start[z] + m.total[z] &&
			m.total[i] * this.width / (m.total[z] || 1) >= 1;
	}

	onKey(e) {
		const m = this.model;
		if (!m || !m.n || e.altKey || e.ctrlKey || e.metaKey)
			return;
		let i = this.sel >= 0 && this.sel < m.n ? this.sel : this.zoom;
		const deeper = () => {
			let best = -1;
			for (let c = m.childFirst[i], end = c + m.childCount[i]; c < end; c++)
				if (this.shown(c) && (best < 0 || m.total[c] > m.total[best]))
					best = c;
			return best;
		};
		const side = (dir) => {
			for (let j = i + dir; j >= m.levelOff[m.depth[i]] && j < m.levelOff[m.depth[i] + 1]; j += dir)
				if (this.shown(j))
					return j;
			return -1;
		};
		let to = -2;
		const down = this.orientation === 'icicle' ? 'ArrowDown' : 'ArrowUp';
		const up = this.orientation === 'icicle' ? 'ArrowUp' : 'ArrowDown';
		if (e.key === down)
			to = deeper();
		else if (e.key === up)
			to = i > 0 ? m.parent[i] : -1;
		else if (e.key === 'ArrowRight')
			to = side(1);
		else if (e.key === 'ArrowLeft')
			to = side(-1);
		else if (e.key === 'Home')
			to = this.zoom;
		else if (e.key === 'Enter' || e.key === ' ') {
			e.preventDefault();
			this.zoomTo(i === this.zoom && i ? m.parent[i] : i);
			this.select(i);
			return;
		} else if (e.key === 'ContextMenu' || (e.key === 'F10' && e.shiftKey)) {
			e.preventDefault();
			const r = this.rectOf(i), b = this.canvas.getBoundingClientRect();
			if (r)
				this.openMenu(i, b.left + r.x + Math.min(r.w / 2, 60), b.top + r.y + ROW);
			return;
		} else if (e.key === 'Escape' && this.sel >= 0) {
			e.preventDefault();
			this.select(-1);
			return;
		}
		if (to === -2)
			return;
		e.preventDefault();
		if (to >= 0)
			this.select(to);
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
				color: i >= 0 ? this.colorOf(i) : this.palette.merged,
			});
		}
		return out;
	}
}
