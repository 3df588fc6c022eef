// gpu_timeline.js: the GPU page's kernel timeline -- each kernel and copy
// the agents shipped (GET /api/v1/gpu/timeline) as a bar in time on its
// lane, a lane per device and stream grouped by process; hovering a bar
// shows its name, duration, stream and the CPU stack that launched it;
// dragging across a lane selects a range (the page's from/until). Used by
// gpu.js.

import { fmtDuration, escapeHTML } from './format.js';

// Draws answer `tl` (the route's JSON) into host over [fromMs, untilMs).
export function timelinePanel(host, tl, fromMs, untilMs, onSelect) {
	const box = document.createElement('div');
	box.className = 'panel gpu-timeline';
	box.id = 'gpu-timeline';
	host.append(box);
	const procs = (tl && tl.processes) || [];
	const n = (tl && tl.spans) || 0;
	box.innerHTML = '<h3>Kernel timeline</h3>' + (tl && tl.truncated
		? `<p class="muted" id="gpu-timeline-cut">The first ${n} kernels and copies of the ` +
		  'range: select a shorter range to see them all.</p>' : '');
	if (!n) {
		box.insertAdjacentHTML('beforeend', '<p class="muted">No kernels in this range: ' +
			'the timeline comes from jobs started with Sonde\'s CUPTI library ' +
			'(<code>CUDA_INJECTION64_PATH</code>) on a node whose agent ships to this ' +
			'server.</p>');
		return;
	}
	// Offsets are from base_ns, the server's from (raised to its retention):
	// bars are placed on [fromMs, untilMs), the page's range.
	const shift = tl.base_ns - fromMs * 1e6, len = Math.max(1, (untilMs - fromMs) * 1e6);
	const tip = document.createElement('div');
	tip.className = 'gpu-tl-tip';
	tip.hidden = true;
	box.append(tip);
	for (const p of procs) {
		const l = p.labels || {};
		const head = document.createElement('div');
		head.className = 'gpu-tl-proc';
		head.textContent = [l.process || '?', l.pid && 'pid ' + l.pid, l.node]
			.filter(Boolean).join(' · ');
		box.append(head);
		for (const lane of p.lanes) {
			const row = document.createElement('div');
			row.className = 'gpu-tl-lane';
			row.dataset.device = lane.device;
			row.dataset.stream = lane.stream;
			row.innerHTML = `<span class="gpu-tl-name">GPU ${lane.device} · stream ` +
				`${lane.stream}</span><div class="gpu-tl-track"></div>`;
			const track = row.querySelector('.gpu-tl-track');
			for (const s of lane.spans) {
				const bar = document.createElement('div');
				bar.className = 'gpu-tl-bar' + (s.kind === 'kernel' ? '' : ' copy');
				bar.style.left = ((s.offset_ns + shift) / len * 100) + '%';
				bar.style.width = (s.dur_ns / len * 100) + '%';
				bar.dataset.name = s.name;
				bar.addEventListener('mouseenter', () => {
					const from = (s.from || '').split(' < ').filter(Boolean);
					tip.innerHTML = `<b>${escapeHTML(s.name)}</b><br>` +
						`${escapeHTML(fmtDuration(s.dur_ns / 1e9))} · GPU ${lane.device} · ` +
						`stream ${lane.stream}` + (s.bytes ? ` · ${s.bytes} bytes` : '') +
						(from.length ? '<div class="gpu-tl-stack">launched from:<br>' +
						 from.map(escapeHTML).join('<br>') + '</div>' : '');
					tip.hidden = false;
					const r = bar.getBoundingClientRect(), b = box.getBoundingClientRect();
					tip.style.left = Math.max(0, r.left - b.left) + 'px';
					tip.style.top = (r.bottom - b.top + 4) + 'px';
				});
				bar.addEventListener('mouseleave', () => (tip.hidden = true));
				track.append(bar);
			}
			// Dragging across a lane selects a range.
			let x0 = null;
			track.addEventListener('mousedown', (e) => (x0 = e.clientX));
			track.addEventListener('mouseup', (e) => {
				if (x0 === null || Math.abs(e.clientX - x0) < 4) {
					x0 = null;
					return;
				}
				const r = track.getBoundingClientRect();
				const at = (x) => fromMs + (untilMs - fromMs) * Math.min(1, Math.max(0,
					(x - r.left) / r.width));
				const a = Math.floor(at(Math.min(x0, e.clientX)));
				const b = Math.ceil(at(Math.max(x0, e.clientX)));
				x0 = null;
				if (b > a && onSelect)
					onSelect(a, b);
			});
			box.append(row);
		}
	}
}
