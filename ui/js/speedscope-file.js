// speedscope-file.js: reads speedscope's file format
// (https://www.speedscope.app/file-format-schema.json) into a call tree:
// checks what the speedscope page reads of a file (rejecting a malformed one
// with a message) and merges its sampled or evented profiles. Used by
// speedscope.js; tested by tests/ui/model.test.mjs.

import { treeNode, treeChild } from './model.js';

export const UNITS = { nanoseconds: 'nanoseconds', microseconds: 'microseconds', milliseconds: 'milliseconds',
		seconds: 'seconds', bytes: 'bytes', none: '' };

// Checks the parts of the format this page reads; throws with what is wrong.
export function validate(f) {
	if (!f || typeof f !== 'object')
		throw new Error('not a JSON object');
	const frames = f.shared && f.shared.frames;
	if (!Array.isArray(frames))
		throw new Error('no shared.frames array -- is this a speedscope file?');
	if (!frames.every((fr) => fr && typeof fr === 'object'))
		throw new Error('a frame is not an object');
	if (!Array.isArray(f.profiles) || !f.profiles.length)
		throw new Error('no profiles');
	const okFrame = (i) => Number.isInteger(i) && i >= 0 && i < frames.length;
	f.profiles.forEach((p, k) => {
		if (!p || typeof p !== 'object')
			throw new Error(`profile ${k} is not an object`);
		if (p.type === 'sampled') {
			if (!Array.isArray(p.samples) || !Array.isArray(p.weights) ||
			    p.samples.length !== p.weights.length)
				throw new Error(`profile ${k}: samples and weights must be arrays of one length`);
			for (const s of p.samples)
				if (!Array.isArray(s) || !s.every(okFrame))
					throw new Error(`profile ${k}: a sample names a frame that does not exist`);
			if (!p.weights.every((w) => typeof w === 'number' && Number.isFinite(w) && w >= 0))
				throw new Error(`profile ${k}: a weight is not a number of at least 0`);
		} else if (p.type === 'evented') {
			if (!Array.isArray(p.events))
				throw new Error(`profile ${k}: no events`);
			for (const e of p.events)
				if (!e || typeof e !== 'object' || !okFrame(e.frame) || (e.type !== 'O' && e.type !== 'C') || !Number.isFinite(e.at))
					throw new Error(`profile ${k}: a malformed event ${JSON.stringify(e)}`);
		} else {
			throw new Error(`profile ${k}: unknown type ${JSON.stringify(p.type)}`);
		}
	});
}

// A profile's call tree: sampled stacks are root first; evented profiles
// open and close frames. In time order only consecutive equal calls merge.
export function buildTree(p, frames, mode) {
	const root = treeNode('total');
	const name = (i) => String(frames[i].name ?? `frame ${i}`);
	const child = (node, n) => {
		if (mode === 'left')
			return treeChild(node, n);
		const last = [...node.kids.values()].pop();
		if (last && last.name === n)
			return last;
		const c = treeNode(n);
		node.kids.set(Symbol(n), c);
		return c;
	};
	if (p.type === 'sampled') {
		p.samples.forEach((s, k) => {
			const w = +p.weights[k] || 0;
			if (w <= 0)
				return;
			let node = root;
			root.total += w;
			for (const fi of s) {
				node = child(node, name(fi));
				node.total += w;
			}
			node.self += w;
		});
	} else {
		const stack = [{ node: root, at: p.startValue || 0, inner: 0 }];
		for (const e of [...p.events].sort((a, b) => a.at - b.at)) {
			if (e.type === 'O') {
				const top = stack[stack.length - 1];
				stack.push({ node: child(top.node, name(e.frame)), at: e.at, inner: 0 });
			} else if (stack.length > 1) {
				const fr = stack.pop();
				const d = e.at - fr.at;
				fr.node.total += d;
				fr.node.self += d - fr.inner;
				stack[stack.length - 1].inner += d;
			}
		}
		// Frames still open at the end close with the last event.
		const end = p.events.reduce((a, e) => Math.max(a, e.at), -Infinity);
		while (stack.length > 1) {
			const fr = stack.pop();
			const d = end - fr.at;
			fr.node.total += d;
			fr.node.self += d - fr.inner;
			stack[stack.length - 1].inner += d;
		}
		root.total = stack[0].inner;
	}
	// Past 2^53 sums lose units and nodes would no longer fit in their parents.
	if (!(root.total <= Number.MAX_SAFE_INTEGER))
		throw new Error(`profile ${JSON.stringify(p.name ?? '')}: its values overflow (sum above 2^53)`);
	return root;
}
