// alerts.js: the Alerts page -- what agents' rules fired, as the server
// received it (docs/alerts.md). Loaded by app.js and gpu.js.

import { fmtCount, fmtDate, escapeHTML } from './format.js';
import { isCurrent, api, showError, emptyState } from './page.js';

export function alertsTable(host, data) {
	host.insertAdjacentHTML('beforeend', '<h3>Alerts</h3>');
	const list = (data && data.alerts) || [];
	if (!data)
		return;
	if (!list.length) {
		emptyState(host, 'No alerts',
			   '<p>Nothing is firing. The agent\'s alert rules (<code>docs/alerts.md</code>) send ' +
			   'what fires here: under <code>sonde run</code> by themselves, from an agent on ' +
			   `another machine when it is started with <code>--server http://${location.host}` +
			   '</code>.</p>');
		return;
	}
	const rows = list.map((a) => {
		const labels = Object.entries(a.labels || {}).filter(([k]) => k !== 'alertname')
			.map(([k, v]) => `<span class="chip">${escapeHTML(k)}=${escapeHTML(v)}</span>`).join(' ');
		const ann = a.annotations || {};
		const val = a.value === undefined || a.value === null ? ''
			: Number.isFinite(+a.value) ? fmtCount(+a.value) : String(a.value);
		return `<tr class="${a.status === 'firing' ? 'firing' : 'resolved'}"><td><span class="status ` +
			`${escapeHTML(a.status)}">${escapeHTML(a.status)}</span></td>` +
			`<td class="fn">${escapeHTML(a.alert || (a.labels || {}).alertname || '')}</td>` +
			`<td>${labels}</td><td class="num">${escapeHTML(val)}</td>` +
			`<td>${escapeHTML(ann.summary || ann.description || '')}</td>` +
			`<td>${a.startsAt ? escapeHTML(fmtDate(Date.parse(a.startsAt))) : ''}</td>` +
			`<td>${a.endsAt ? escapeHTML(fmtDate(Date.parse(a.endsAt))) : ''}</td></tr>`;
	});
	host.insertAdjacentHTML('beforeend', '<table id="alerts-table" class="data"><thead><tr>' +
		'<th>Status</th><th>Alert</th><th>Labels</th><th class="num">Value</th><th>Summary</th>' +
		`<th>Since</th><th>Ended</th></tr></thead><tbody>${rows.join('')}</tbody></table>`);
}

export async function renderAlerts(main, gen) {
	const box = document.createElement('div');
	box.className = 'panel';
	main.append(box);
	let data = null;
	try {
		data = await api('/api/v1/alerts', {});
	} catch (e) {
		showError(e);
	}
	if (isCurrent(gen))
		alertsTable(box, data);
}
