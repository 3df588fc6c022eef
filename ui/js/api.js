// api.js: the UI's client of the server's JSON API (docs/api.md). Every call
// resolves to the parsed answer or rejects with an ApiError carrying the
// server's own message ({"error": "..."}), which the views show as it is.

export class ApiError extends Error {
	constructor(message, path, status) {
		super(message);
		this.path = path;
		this.status = status;
	}
}

// path?params, leaving out empty parameters.
export function apiURL(path, params = {}) {
	const q = new URLSearchParams();
	for (const [k, v] of Object.entries(params))
		if (v !== undefined && v !== null && v !== '')
			q.set(k, v);
	const s = q.toString();
	return s ? `${path}?${s}` : path;
}

export async function getJSON(path, params = {}, signal) {
	const url = apiURL(path, params);
	let r;
	try {
		r = await fetch(url, { signal, headers: { Accept: 'application/json' } });
	} catch (e) {
		if (e.name === 'AbortError')
			throw e;
		throw new ApiError(`can't reach the Sonde server (${e.message}) -- is it running?`, path, 0);
	}
	const text = await r.text();
	let body = null;
	try {
		body = JSON.parse(text);
	} catch (e) {
		body = null;
	}
	if (!r.ok) {
		const msg = body && typeof body.error === 'string' ? body.error
			: `${r.status} ${r.statusText}${text ? ': ' + text.slice(0, 200) : ''}`;
		throw new ApiError(`${path}: ${msg}`, path, r.status);
	}
	if (body === null)
		throw new ApiError(`${path}: the server's answer is not JSON`, path, r.status);
	notePartial(path, body);
	return body;
}

// A coordinator's answer that some of its servers are missing from says so
// ("partial": true, "failed": [{"server", "name", "error"}], docs/api.md):
// the banner names them while the latest answer of any route is partial,
// and goes once every route answers whole again.
const partial = new Map();

function notePartial(path, body) {
	if (body && body.partial === true && Array.isArray(body.failed))
		partial.set(path, body.failed);
	else if (!partial.delete(path))
		return;
	showPartial();
}

function showPartial() {
	let el = document.getElementById('partial-banner');
	if (!partial.size) {
		if (el)
			el.hidden = true;
		return;
	}
	if (!el) {
		el = document.createElement('div');
		el.id = 'partial-banner';
		el.setAttribute('role', 'status');
		el.style.cssText = 'background:#fff3cd;color:#4d3800;border-bottom:1px solid #c9a227;' +
			'padding:6px 12px;font-size:14px';
		document.body.prepend(el);
	}
	const servers = new Map();
	for (const failed of partial.values())
		for (const f of failed)
			servers.set(f.server, f);
	const names = [...servers.values()].map((f) =>
		`${f.name && f.name !== f.server ? f.name + ' (' + f.server + ')' : f.server}: ${f.error}`);
	el.textContent = `Partial view: ${servers.size} server${servers.size === 1 ? '' : 's'} ` +
		`did not answer, their data is missing -- ${names.join('; ')}`;
	el.hidden = false;
}
