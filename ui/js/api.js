// api.js: the UI's client of the server's JSON API (docs/api.md). Every call
// resolves to the parsed answer or rejects with an ApiError carrying the
// server's own message ({"error": "..."}), which the views show as it is.
// A server run with --auth answers 401 without a token: the UI then asks
// for one, keeps it for the browser session (sessionStorage) and sends it
// with every request (Authorization: Bearer), downloads included.

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

// ---- the token (sonde server --auth) ----

const TOKEN_KEY = 'sonde-token';

export function authToken() {
	try {
		return sessionStorage.getItem(TOKEN_KEY) || '';
	} catch (e) {
		return '';
	}
}

export function authHeaders() {
	const t = authToken();
	return t ? { Authorization: `Bearer ${t}` } : {};
}

// The dialog that asks for a token; the page starts again with it.
function askToken(why) {
	let form = document.getElementById('token-dialog');
	if (form) {
		form.querySelector('.token-why').textContent = why;
		return;
	}
	form = document.createElement('form');
	form.id = 'token-dialog';
	form.setAttribute('role', 'dialog');
	form.setAttribute('aria-modal', 'true');
	form.setAttribute('aria-labelledby', 'token-title');
	form.innerHTML = '<h2 id="token-title">This Sonde server needs a token</h2>' +
		'<p class="token-why"></p>' +
		'<label for="token-input">Token (from <code>sonde token create</code>; kept for this ' +
		'browser session only)</label>' +
		'<input id="token-input" name="token" type="password" autocomplete="off" required ' +
		'spellcheck="false">' +
		'<div class="token-actions"><button type="submit">Use this token</button>' +
		'<button type="button" id="token-forget">Forget the token</button></div>';
	form.querySelector('.token-why').textContent = why;
	form.addEventListener('submit', (e) => {
		e.preventDefault();
		const t = form.querySelector('input').value.trim();
		if (!t)
			return;
		try {
			sessionStorage.setItem(TOKEN_KEY, t);
		} catch (err) {
			// private mode: the token lives as long as the page
		}
		location.reload();
	});
	form.querySelector('#token-forget').addEventListener('click', () => {
		try {
			sessionStorage.removeItem(TOKEN_KEY);
		} catch (err) {
			// nothing kept
		}
		form.querySelector('input').value = '';
	});
	document.body.append(form);
	form.querySelector('input').focus();
}

// Saves what url answers as name, sending the token: a link can't.
export async function download(url, name) {
	const r = await fetch(url, { headers: authHeaders() });
	if (!r.ok) {
		if (r.status === 401)
			askToken('The server refused the token: enter another.');
		throw new ApiError(`${url}: ${r.status} ${r.statusText}`, url, r.status);
	}
	const a = document.createElement('a');
	a.href = URL.createObjectURL(await r.blob());
	a.download = name;
	a.click();
	setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

export async function getJSON(path, params = {}, signal) {
	const url = apiURL(path, params);
	let r;
	try {
		r = await fetch(url, { signal, headers: { Accept: 'application/json', ...authHeaders() } });
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
		if (r.status === 401)
			askToken(authToken() ? `The server refused the token: ${msg}` : msg);
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
