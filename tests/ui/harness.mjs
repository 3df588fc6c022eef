// harness.mjs: what the browser tests share -- Debian's Chromium driven by
// playwright-core, the page, the server's address and testdata.py's truth,
// navigation that waits for the UI to be idle, screenshots, the drawn flame
// graph, and the runner. The tests are in run.mjs and the files it imports.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { chromium } from 'playwright-core';

export const BASE = process.env.SONDE_URL;
export const TRUTH = JSON.parse(fs.readFileSync(process.env.SONDE_UI_TRUTH, 'utf8'));
export const ART = process.env.SONDE_UI_ARTIFACTS || fs.mkdtempSync(path.join(os.tmpdir(), 'sonde-ui-'));
export const ONLY = process.env.SONDE_UI_ONLY || '';
export const ROW = 18;
fs.mkdirSync(ART, { recursive: true });

export const tests = [];
export const test = (name, fn) => tests.push({ name, fn });
export const pct = (a, b) => (a / b * 100).toFixed(2) + '%';
export const Q = (svc) => `{service_name="${svc}", type="cpu"}`;
export const RANGE = { from: String(TRUTH.start_ms), until: String(TRUTH.end_ms) };

export function url(params = {}, page = '') {
	const q = new URLSearchParams(params).toString();
	return BASE.replace(/\/$/, '') + '/' + page + (q ? '?' + q : '');
}

const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sonde-ui-chromium-'));
export const context = await chromium.launchPersistentContext(userDataDir, {
	executablePath: process.env.SONDE_CHROMIUM || '/usr/bin/chromium',
	headless: true,
	acceptDownloads: true,
	viewport: { width: 1400, height: 900 },
	args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
	       '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
export const page = context.pages()[0] || await context.newPage();
export const pageErrors = [];
page.on('pageerror', (e) => pageErrors.push(e.message));
page.on('console', (m) => {
	if (m.type() === 'error')
		console.log('  browser console: ' + m.text());
});
// Nothing but our server: a request elsewhere would mean the UI needs the network.
export const foreign = [];
await context.route('**/*', (route) => {
	const u = new URL(route.request().url());
	if (u.origin !== new URL(BASE).origin && u.protocol !== 'data:' && u.protocol !== 'blob:') {
		foreign.push(u.href);
		return route.abort();
	}
	return route.continue();
});

export async function idle(p = page) {
	await p.waitForFunction(() => document.body.dataset.busy === '0' && window.__sonde &&
		(window.__sonde.renders === undefined ||
		 document.body.dataset.rendered === String(window.__sonde.renders)), null,
	{ timeout: 20000 });
	await frames(p, 2);
}

export const frames = (p, n) => p.evaluate((n) => new Promise((res) => {
	const step = (k) => (k ? requestAnimationFrame(() => step(k - 1)) : res());
	step(n);
}), n);

export async function go(params, p = page, file = '') {
	await p.goto(url(params, file));
	await idle(p);
}

export async function shot(name, p = page) {
	await p.screenshot({ path: path.join(ART, name + '.png'), fullPage: true });
}

// What the named flame graph last drew, and where its canvas is on screen.
export async function flame(which = null, p = page) {
	const h = await p.evaluateHandle((w) => (w ? window.__sonde.flames[w] : window.__sonde.flame).canvas,
		which);
	await h.scrollIntoViewIfNeeded();
	await frames(p, 2);
	const box = await h.boundingBox();
	const info = await p.evaluate((w) => {
		const f = w ? window.__sonde.flames[w] : window.__sonde.flame;
		return { rects: f.rects(), width: f.width, height: f.height, levels: f.model.levels,
			 numTicks: f.model.numTicks, orientation: f.orientation };
	}, which);
	return { ...info, box };
}

export const find = (f, name) => f.rects.filter((r) => r.name === name);
export function one(f, name) {
	const r = find(f, name);
	assert.equal(r.length, 1, `${name} drawn once (drawn: ${f.rects.map((x) => x.name).join(',')})`);
	return r[0];
}

// The colour on the canvas at the middle of a rectangle, [r, g, b, a].
export async function pixel(r, which = null, p = page) {
	return p.evaluate(([x, y, w]) => {
		const f = w ? window.__sonde.flames[w] : window.__sonde.flame;
		return [...f.ctx.getImageData(Math.round(x * f.dpr), Math.round(y * f.dpr), 1, 1).data];
	}, [r.x + r.w / 2, r.y + ROW / 2, which]);
}

export async function hover(f, r, p = page) {
	await p.mouse.move(f.box.x + r.x + r.w / 2, f.box.y + r.y + ROW / 2);
	await frames(p, 2);
	return p.evaluate(() => {
		const t = window.__sonde.flame.tip;
		return t.hidden ? '' : t.innerText;
	});
}

export const near = (a, b, tol, what) => assert.ok(Math.abs(a - b) <= tol, `${what}: ${a} is not within ${tol} of ${b}`);

// Every drawn node is as wide as its share of the zoomed node, and lies
// inside the node drawn above it (its parent).
export function checkGeometry(f, zoomTotal = f.numTicks) {
	for (const r of f.rects) {
		if (r.name === null)
			continue;
		if (r.x === 0 && r.w === f.width)
			continue; // the zoomed node or one of its ancestors
		near(r.w, r.total / zoomTotal * f.width, 0.6, `width of ${r.name}`);
	}
}

// Runs the registered tests in order (those whose name has SONDE_UI_ONLY),
// then checks that the page threw nothing and asked for nothing but the
// server. Prints "ok"/"not ok" per test and "ui: N passed, N failed"; exits
// 1 on a failure.
export async function runAll() {
	test('no uncaught page errors and no request left the server', async () => {
		assert.deepEqual(pageErrors, []);
		assert.deepEqual(foreign, []);
	});

	let pass = 0, fail = 0;
	for (const t of tests) {
		if (ONLY && !t.name.includes(ONLY))
			continue;
		const t0 = Date.now(), errs = pageErrors.length;
		try {
			await t.fn();
			assert.deepEqual(pageErrors.slice(errs), [], 'uncaught page errors');
			pass++;
			console.log(`ok - ${t.name} (${Date.now() - t0} ms)`);
		} catch (e) {
			fail++;
			console.log(`not ok - ${t.name}\n  ${String(e.stack || e).split('\n').slice(0, 6).join('\n  ')}`);
			try {
				await shot('FAIL-' + t.name.replace(/[^a-z0-9]+/gi, '-').slice(0, 60));
			} catch (e2) {
				// the page may be gone
			}
		}
	}
	await context.close();
	fs.rmSync(userDataDir, { recursive: true, force: true });
	console.log(`ui: ${pass} passed, ${fail} failed`);
	process.exit(fail ? 1 : 0);
}
