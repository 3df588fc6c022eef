// format.js: numbers, units, shares and times as the UI prints them (tooltips,
// tables, chart axes). Pure functions, used by every view.

const GROUP = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

export function fmtCount(v) {
	const a = Math.abs(v);
	if (a < 1e4)
		return Number.isInteger(v) ? GROUP.format(v) : v.toPrecision(3).replace(/\.?0+$/, '');
	for (const [d, s] of [[1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']])
		if (a >= d)
			return (v / d).toFixed(a / d >= 100 ? 0 : a / d >= 10 ? 1 : 2) + ' ' + s;
	return String(v);
}

export function fmtDuration(s) {
	const a = Math.abs(s);
	if (a === 0)
		return '0 s';
	if (a >= 86400)
		return (s / 86400).toFixed(1) + ' d';
	if (a >= 3600)
		return (s / 3600).toFixed(1) + ' h';
	if (a >= 60)
		return (s / 60).toFixed(1) + ' min';
	if (a >= 1)
		return s.toFixed(a >= 100 ? 0 : 2) + ' s';
	if (a >= 1e-3)
		return (s * 1e3).toFixed(a >= 0.1 ? 0 : 1) + ' ms';
	if (a >= 1e-6)
		return (s * 1e6).toFixed(a >= 1e-4 ? 0 : 1) + ' µs';
	return (s * 1e9).toFixed(0) + ' ns';
}

export function fmtBytes(b) {
	const a = Math.abs(b);
	const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
	let i = 0;
	while (a >= 1024 ** (i + 1) && i < units.length - 1)
		i++;
	const v = b / 1024 ** i;
	return (i === 0 ? v.toFixed(0) : v.toFixed(Math.abs(v) >= 100 ? 0 : 1)) + ' ' + units[i];
}

// A value in a profile's or metric's unit ('samples', 'nanoseconds', 'bytes',
// 'seconds', 'launches', or a client's own).
export function fmtValue(v, unit) {
	switch (unit) {
	case 'nanoseconds':
		return fmtDuration(v / 1e9);
	case 'seconds':
		return fmtDuration(v);
	case 'milliseconds':
		return fmtDuration(v / 1e3);
	case 'microseconds':
		return fmtDuration(v / 1e6);
	case 'bytes':
		return fmtBytes(v);
	case '':
	case undefined:
	case null:
		return fmtCount(v);
	default:
		return fmtCount(v) + ' ' + unit;
	}
}

// A share (0..1) as a percentage with two decimals.
export function fmtPct(f) {
	if (!Number.isFinite(f))
		return '–';
	return (f * 100).toFixed(2) + '%';
}

const pad = (n) => String(n).padStart(2, '0');

// A time-axis label for time ms when ticks are step ms apart.
export function fmtTick(ms, step) {
	const d = new Date(ms);
	const hm = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
	if (step >= 86400e3)
		return `${d.getMonth() + 1}-${pad(d.getDate())}`;
	if (step >= 3600e3 && d.getHours() === 0 && d.getMinutes() === 0)
		return `${d.getMonth() + 1}-${pad(d.getDate())}`;
	if (step >= 60e3)
		return hm;
	return `${hm}:${pad(d.getSeconds())}`;
}

export function fmtDate(ms) {
	const d = new Date(ms);
	return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
	       `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// Resolves the API's time forms (now, now-15m, ms since the epoch) to ms.
export function resolveTime(s, now = Date.now()) {
	s = String(s ?? '').trim();
	if (s === '' || s === 'now')
		return now;
	const m = /^now-(\d+)([smhd])$/.exec(s);
	if (m)
		return now - +m[1] * { s: 1e3, m: 60e3, h: 3600e3, d: 86400e3 }[m[2]];
	if (/^\d+$/.test(s))
		return +s;
	return NaN;
}

export function escapeHTML(s) {
	return String(s).replace(/[&<>"']/g, (c) => ({
		'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;',
	})[c]);
}
