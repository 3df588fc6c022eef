// auth.mjs: the web UI of a `sonde server --auth`: without a token every
// view asks for one in a dialog (role dialog); a read token entered there
// is kept for the browser session only (sessionStorage, never
// localStorage) and the views then draw that token's project alone -- the
// same service of another project never shows; a download sends the token
// (the pprof saved holds the project's functions only); a refused token
// brings the dialog back saying so. Run by tests/integration/test_ui_auth.py,
// which starts the server, makes the tokens and loads both projects.
// Environment beyond harness.mjs's: SONDE_TOKEN_READ (project alpha's),
// SONDE_OTHER_FN (a function of project beta only).

import assert from 'node:assert/strict';
import fs from 'node:fs';
import zlib from 'node:zlib';
import { TRUTH, RANGE, Q, test, page, go, flame, one, find, shot, runAll } from './harness.mjs';

const dialog = () => page.evaluate(() => {
	const d = document.getElementById('token-dialog');
	return d ? { role: d.getAttribute('role'), text: d.textContent,
		     focused: document.activeElement && document.activeElement.id } : null;
});

test('without a token every view asks for one', async () => {
	await go({ query: Q(TRUTH.service), ...RANGE, view: 'flame' });
	const d = await dialog();
	assert.ok(d, 'the token dialog is shown');
	assert.equal(d.role, 'dialog');
	assert.match(d.text, /needs a token/);
	assert.equal(d.focused, 'token-input', 'the token field has the focus');
	await shot('auth-dialog');
});

test('a read token entered there draws its project alone', async () => {
	await page.fill('#token-input', process.env.SONDE_TOKEN_READ);
	await Promise.all([page.waitForEvent('load'), page.click('#token-dialog button[type=submit]')]);
	await go({ query: Q(TRUTH.service), ...RANGE, view: 'flame' });
	assert.equal(await dialog(), null, 'no dialog once a good token is kept');
	const f = await flame();
	assert.equal(f.numTicks, TRUTH.total, 'the project\'s samples, not the other\'s too');
	one(f, 'hot_a');
	assert.equal(find(f, process.env.SONDE_OTHER_FN).length, 0,
		     'the other project\'s function is not drawn');
	const kept = await page.evaluate(() => ({ session: sessionStorage.getItem('sonde-token'),
						  local: localStorage.length }));
	assert.equal(kept.session, process.env.SONDE_TOKEN_READ, 'kept in sessionStorage');
	assert.equal(kept.local, 0, 'nothing in localStorage');
	await shot('auth-flame');
});

test('a download sends the token', async () => {
	const [dl] = await Promise.all([page.waitForEvent('download'), page.click('#export-pprof')]);
	const raw = fs.readFileSync(await dl.path());
	const pb = raw[0] === 0x1f && raw[1] === 0x8b ? zlib.gunzipSync(raw) : raw;
	assert.ok(pb.includes('hot_a'), 'the pprof holds the project\'s functions');
	assert.ok(!pb.includes(process.env.SONDE_OTHER_FN), 'and not the other project\'s');
});

test('a refused token brings the dialog back', async () => {
	await page.evaluate(() => sessionStorage.setItem('sonde-token', 'sonde_refused'));
	await go({ query: Q(TRUTH.service), ...RANGE, view: 'flame' });
	const d = await dialog();
	assert.ok(d, 'the dialog is back');
	assert.match(d.text, /refused the token/);
});

await runAll();
