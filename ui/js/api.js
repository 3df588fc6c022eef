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
	return body;
}
