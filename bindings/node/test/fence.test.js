// fence.test.js - what a handler sees when its claim goes: step.signal on a
// lost lease and on a lease deadline that passes in silence, and a stale
// holder's checkpoints and shared writes refused by the fence.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { startEtcd } from './etcd.js';
import { connect, onEnd, spec, startRunner, waitDone, waitFor } from './helpers.js';

// Resolves with the abort reason once signal fires.
function aborted(signal) {
	return new Promise((resolve) => signal.addEventListener('abort', () => resolve(signal.reason), { once: true }));
}

test('step.signal fires when the runner loses its lease', async (t) => {
	const m = await startEtcd(t);
	const c = await connect(t, m);
	const reasons = [];
	let lost = null;
	let running = false;
	startRunner(t, c, { name: 'loser' }, (r) => {
		r.on('leaseLost', (e) => {
			lost = e.reason;
		});
		r.handle('wait', async (step) => {
			if (step.attempt > 1) return; // taken again on a new lease
			running = true;
			reasons.push(await aborted(step.signal));
		});
	});
	await c.submit(spec('l1', ['wait']));
	await waitFor(() => running, 10000, 'the step to start');
	const [me] = await c.runners();
	const t0 = Date.now();
	await m.etcdctl('lease', 'revoke', me.lease);
	await waitFor(() => reasons.length === 1, 5000, 'the abort');
	t.diagnostic(`aborted ${Date.now() - t0} ms after the revoke: ${reasons[0].message}`);
	assert.equal(reasons[0].code, 'LR_ECANCELLED');
	assert.match(reasons[0].message, /lease/);
	await waitFor(() => lost !== null, 5000, 'the leaseLost event');
	assert.equal((await waitDone(c, 'l1')).state, 'succeeded');
});

test('step.signal fires when the lease deadline passes with no word from etcd', async (t) => {
	const m = await startEtcd(t);
	const c = await connect(t, m);
	let running = false;
	let reason = null;
	startRunner(t, c, { name: 'frozen-out' }, (r) => {
		r.handle('wait', async (step) => {
			if (reason !== null) return;
			running = true;
			reason = await aborted(step.signal);
		});
	});
	await c.submit(spec('d1', ['wait']));
	await waitFor(() => running, 10000, 'the step to start');
	const t0 = Date.now();
	m.pause(); // keepalives go unanswered; nothing tells the runner
	onEnd(t, () => m.resume());
	await waitFor(() => reason !== null, 5000, 'the abort');
	const took = Date.now() - t0;
	m.resume();
	t.diagnostic(`aborted ${took} ms after etcd froze: ${reason.message}`);
	assert.match(reason.message, /lease/);
	assert.ok(took <= 2000 + 500, `the deadline is at most the TTL (2 s) away: took ${took} ms`);
});

// The event loop held up (as by a freeze of the whole process) while the
// lease deadline passes: the runner's own thread cannot tell JavaScript,
// so the first look at step.cancelled or step.signal must see it from the
// clock.
test('step.cancelled and step.signal see a passed deadline at the first look', async (t) => {
	const m = await startEtcd(t);
	const c = await connect(t, m);
	let running = false;
	let go;
	const frozen = new Promise((resolve) => {
		go = resolve;
	});
	let seen = null;
	startRunner(t, c, { name: 'held-up' }, (r) => {
		r.handle('wait', async (step) => {
			if (seen !== null) return;
			const kept = step.signal; // kept from before the freeze
			running = true;
			await frozen;
			const end = Date.now() + 3000; // past the TTL (2 s), the loop held
			while (Date.now() < end);
			seen = { kept: kept.aborted, cancelled: step.cancelled, signal: step.signal.aborted,
			         reason: step.signal.reason?.message };
		});
	});
	await c.submit(spec('h1', ['wait']));
	await waitFor(() => running, 10000, 'the step to start');
	m.pause(); // no renewal from now on
	onEnd(t, () => m.resume());
	go();
	await waitFor(() => seen !== null, 10000, 'the handler to look');
	m.resume();
	t.diagnostic(`kept signal aborted at the first look: ${seen.kept}; ${seen.reason}`);
	assert.equal(seen.cancelled, true);
	assert.equal(seen.signal, true);
	assert.match(seen.reason, /lease deadline passed/);
});

// Move the task's claim to a lease of the test's own behind the runner's
// back, as after an expiry and a takeover it has not heard of; returns that
// lease (hexadecimal).
async function stealClaim(m, prefix, id) {
	const key = `${prefix}claims/${id}`;
	const value = (await m.etcdctl('get', key, '--print-value-only')).trim();
	const lease = (await m.etcdctl('lease', 'grant', '30')).match(/lease ([0-9a-f]+) granted/)[1];
	await m.etcdctl('del', key);
	await m.etcdctl('put', `--lease=${lease}`, key, value);
	return lease;
}

async function modRevision(m, key) {
	const out = JSON.parse(await m.etcdctl('get', key, '-w', 'json'));
	return out.kvs?.[0]?.mod_revision ?? 0;
}

test("a stale holder's checkpoint and shared writes are refused", async (t) => {
	const m = await startEtcd(t);
	const c = await connect(t, m, '/stale/');
	let stolen = null;
	let go;
	const moved = new Promise((resolve) => {
		go = resolve;
	});
	const results = {};
	let attempts = 0;
	startRunner(t, c, { name: 'stale' }, (r) => {
		r.handle('work', async (step) => {
			attempts += 1;
			step.state.n = attempts;
			if (attempts > 1) {
				await step.checkpoint(); // the new holder's checkpoint goes through
				return;
			}
			stolen = step.taskId;
			await moved;
			results.checkpoint = await step.checkpoint().catch((e) => e);
			results.shared = await step.sharedPut({ 'stale.x': 1 }).catch((e) => e);
			results.signalled = step.signal.aborted;
		});
	});
	await c.submit(spec('s1', ['work'], { state: { n: 0 }, retry_backoff_ms: 10 }));
	await waitFor(() => stolen !== null, 10000, 'the step to start');
	const ckpt = '/stale/checkpoints/s1';
	const before = await modRevision(m, ckpt);
	const lease = await stealClaim(m, '/stale/', 's1');
	go();
	await waitFor(() => results.signalled !== undefined, 5000, 'the handler to try');
	// Refused by its fence, or not even tried: the runner's watch saw the
	// claim deleted first and stopped the step.
	assert.ok(['LR_ELEASE', 'LR_ECANCELLED'].includes(results.checkpoint.code),
		results.checkpoint.message);
	assert.match(results.checkpoint.message, /claim|stopped/);
	assert.ok(['LR_ELEASE', 'LR_ECANCELLED'].includes(results.shared.code), results.shared.message);
	assert.equal(results.signalled, true);
	assert.equal(await modRevision(m, ckpt), before, 'the checkpoint is as it was');
	assert.equal(await c.shared.get('stale.x'), undefined);

	// The other holder goes away: the task is taken again and finishes.
	await m.etcdctl('lease', 'revoke', lease);
	assert.equal((await waitDone(c, 's1')).state, 'succeeded');
	assert.equal(attempts, 2);
});
