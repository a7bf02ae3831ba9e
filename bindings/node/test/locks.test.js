// locks.test.js - client.withLocks against a real etcd: exclusion and
// sharing by mode, the fence, a wait that runs out naming the holder,
// limits, bad input, release when fn throws, the abort on lease loss, more
// waiters than libuv has pool threads, and a wait aborted by its signal.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { Client, LeaseRunError } from '../lib/index.js';
import { etcdctl, startEtcd } from './etcd.js';
import { connect, onEnd, waitFor } from './helpers.js';

/** p, or a rejection naming what after ms (a hang fails the test). */
function within(ms, p, what) {
	let timer;
	const late = new Promise((resolve, reject) => {
		timer = setTimeout(() => reject(new Error(`${what}: not settled after ${ms} ms`)), ms);
	});
	return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/** The keys under prefix `wants/`: one per holder waiting or holding. */
async function wants(m, prefix) {
	const out = await etcdctl(m.endpoint, 'get', '--prefix', `${prefix}wants/`, '--keys-only');
	return out.split('\n').filter(Boolean);
}

test('writers take turns, readers share, and each holder gets a newer fence', async (t) => {
	const m = await startEtcd(t);
	const c = await connect(t, m, '/node-locks/');
	const log = [];
	const work = (name) => async (fence) => {
		log.push(`${name} in ${fence}`);
		await sleep(150);
		log.push(`${name} out`);
		return fence;
	};
	const [f1, f2] = await Promise.all([
		c.withLocks({ 'thread/8f2c': 'X' }, work('a')),
		c.withLocks({ 'thread/8f2c': 'X' }, work('b')),
	]);
	assert.notEqual(f1, f2);
	// One after the other: nobody came in while the other was inside.
	assert.match(log[0], / in /);
	assert.match(log[1], / out$/);
	assert.equal(log[1].split(' ')[0], log[0].split(' ')[0]);
	log.length = 0;
	await Promise.all([
		c.withLocks({ docs: 'S' }, work('r1')),
		c.withLocks({ docs: 'S' }, work('r2')),
	]);
	assert.match(log[1], / in /, `readers run side by side: ${log}`);
});

test('a wait that runs out rejects with LR_EBUSY naming the holder', async (t) => {
	const m = await startEtcd(t);
	const c = await connect(t, m, '/node-locks-busy/');
	let release;
	const held = c.withLocks({ 'agents/support': 'X' }, () => new Promise((r) => (release = r)));
	await sleep(200);
	await assert.rejects(
		c.withLocks({ 'agents/support/tools': 'IX' }, { wait: 0.3 }, () => 'never'),
		(err) => {
			assert.ok(err instanceof LeaseRunError);
			assert.equal(err.code, 'LR_EBUSY');
			assert.match(err.message, /X agents\/support held by run /);
			return true;
		},
	);
	release();
	await held;
	assert.equal(await c.withLocks({ 'agents/support/tools': 'IX' }, { wait: 1 }, () => 'ok'), 'ok');
});

test('wait: Infinity waits for the holder; waits and TTLs C cannot take are refused', async (t) => {
	const m = await startEtcd(t);
	const c = await connect(t, m, '/node-locks-wait/');
	let release;
	const held = c.withLocks({ w: 'X' }, () => new Promise((r) => (release = r)));
	await sleep(200);
	const waiter = c.withLocks({ w: 'X' }, { wait: Infinity }, () => 'waited');
	await sleep(300);
	release();
	await held;
	assert.equal(await waiter, 'waited');
	const range = (what) => ({ name: 'RangeError', message: new RegExp(`^${what}: `) });
	for (const wait of [NaN, -1, -Infinity, 1e300, 31536001])
		await assert.rejects(c.withLocks({ w: 'X' }, { wait }, () => 'taken'), range('wait'), `wait ${wait}`);
	for (const ttl of [0.5, 0, NaN, Infinity, 86401])
		await assert.rejects(c.withLocks({ w: 'X' }, { ttl }, () => 'taken'), range('ttl'), `ttl ${ttl}`);
	await assert.rejects(c.withLocks({ w: 'X' }, { wait: '1' }, () => 'taken'), { name: 'TypeError' });
});

test('limits give slots, bad input is refused, and a throwing fn still releases', async (t) => {
	const m = await startEtcd(t);
	const c = await connect(t, m, '/node-locks-limit/');
	const slots = await c.withLocks({}, { limits: { gpu: 4 } }, (fence, signal, s) => s);
	assert.ok(slots.gpu >= 0 && slots.gpu < 4);
	await assert.rejects(c.withLocks({ 'a//b': 'X' }, () => 1), { code: 'LR_EINVAL' });
	await assert.rejects(c.withLocks({ a: 'W' }, () => 1), { code: 'LR_EINVAL', message: /locks\.a/ });
	await assert.rejects(c.withLocks({ a: 'X' }, { limits: { gpu: 0 } }, () => 1), {
		code: 'LR_EINVAL',
	});
	await assert.rejects(
		c.withLocks({ a: 'X' }, () => {
			throw new Error('boom');
		}),
		/boom/,
	);
	// Given back: taken again at once.
	assert.equal(await c.withLocks({ a: 'X' }, { wait: 0.5 }, () => 'again'), 'again');
});

test('the signal aborts when the lease is lost', async (t) => {
	const m = await startEtcd(t);
	const c = await connect(t, m, '/node-locks-lost/');
	const { execFileSync } = await import('node:child_process');
	const reason = await c.withLocks({ lost: 'X' }, { ttl: 2 }, async (fence, signal) => {
		// Revoke the hold's lease from outside, as if etcd expired it.
		const out = execFileSync('etcdctl', ['--endpoints', m.endpoint, 'get', '--prefix',
			'/node-locks-lost/wants/', '-w', 'json'], { encoding: 'utf8' });
		const lease = out.match(/"lease":(\d+)/)[1]; // over 2^53: kept as text
		execFileSync('etcdctl', ['--endpoints', m.endpoint, 'lease', 'revoke',
			BigInt(lease).toString(16)], { env: { ...process.env, ETCDCTL_API: '3' } });
		await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
		return signal.reason;
	});
	assert.equal(reason.code, 'LR_ELEASE');
});

test("a failed release is a warning: fn's result or error stands", async (t) => {
	const m = await startEtcd(t);
	const c = await Client.connect({ endpoints: m.endpoint, prefix: '/node-locks-rel/', callTimeout: 0.5 });
	onEnd(t, () => c.close());
	onEnd(t, () => m.resume());
	const warning = async (warned) => {
		const [w] = await warned;
		m.resume();
		assert.ok(w instanceof LeaseRunError, `${w}`);
		assert.match(w.message, /release hold .*expires on its own/);
	};
	let warned = once(process, 'warning');
	const result = await c.withLocks({ one: 'X' }, async () => {
		m.pause(); // the release cannot reach etcd
		return 'the result';
	});
	assert.equal(result, 'the result');
	await warning(warned);
	warned = once(process, 'warning');
	await assert.rejects(
		c.withLocks({ two: 'X' }, async () => {
			m.pause();
			throw new Error('the error');
		}),
		/the error/,
	);
	await warning(warned);
});

test('more waiters than libuv has pool threads all get their turn, and the pool keeps working', async (t) => {
	const m = await startEtcd(t);
	const c = await connect(t, m, '/node-locks-pool/');
	const waiters = Number(process.env.UV_THREADPOOL_SIZE ?? 4) + 2;
	const inside = [];
	let busy = 0;
	const all = Promise.all(
		Array.from({ length: waiters }, (_, i) =>
			c.withLocks({ 'pool/x': 'X' }, async () => {
				assert.equal(busy++, 0, 'one holder at a time');
				// The pool still serves files and the client while the
				// others wait.
				await readFile(new URL(import.meta.url));
				await c.list();
				await sleep(20);
				busy--;
				inside.push(i);
			}),
		),
	);
	await sleep(300);
	await within(5000, readFile(new URL(import.meta.url)), 'a file read while they wait');
	await within(5000, c.list(), 'client.list() while they wait');
	await within(30000, all, `${waiters} withLocks on one X lock`);
	assert.equal(inside.length, waiters);
});

test('an aborted wait rejects at once, naming the locks, and leaves nothing queued', async (t) => {
	const m = await startEtcd(t);
	const prefix = '/node-locks-abort/';
	const c = await connect(t, m, prefix);
	let release;
	const held = c.withLocks({ 'abort/x': 'X' }, () => new Promise((r) => (release = r)));
	await waitFor(async () => (await wants(m, prefix)).length === 1, 5000, 'the holder');
	const ac = new AbortController();
	let ran = false;
	const waiter = c.withLocks({ 'abort/x': 'X' }, { signal: ac.signal }, () => (ran = true));
	await waitFor(async () => (await wants(m, prefix)).length === 2, 5000, 'the waiter queued');
	ac.abort();
	await within(3000, assert.rejects(waiter, (err) => {
		assert.equal(err.name, 'AbortError');
		assert.equal(err.code, 'LR_ECANCELLED');
		assert.match(err.message, /abort\/x/);
		return true;
	}), 'the aborted wait');
	assert.equal((await wants(m, prefix)).length, 1, 'only the holder is left');
	// A signal aborted already: nothing is asked of etcd at all.
	await assert.rejects(c.withLocks({ 'abort/x': 'X' }, { signal: AbortSignal.abort() }, () => (ran = true)),
		{ name: 'AbortError' });
	release();
	await held;
	assert.equal(ran, false);
	assert.deepEqual(await wants(m, prefix), []);
	// Given back: taken again at once.
	assert.equal(await c.withLocks({ 'abort/x': 'X' }, { wait: 1 }, () => 'ok'), 'ok');
});

test('locks or limits a strict JSON reader cannot take are refused, never dropped', async (t) => {
	const m = await startEtcd(t);
	const prefix = '/node-locks-odd/';
	const c = await connect(t, m, prefix);
	let ran = 0;
	const fn = () => (ran += 1);
	// 1e20 is written 100000000000000000000 by JSON.stringify, a lone
	// surrogate as "\ud800": were they read as "no limits" or "no locks",
	// the other half would be held alone.
	await assert.rejects(c.withLocks({ a: 'X' }, { limits: { gpu: 1e20 }, wait: 0 }, fn), {
		code: 'LR_EINVAL',
		message: /limits\.gpu/,
	});
	await assert.rejects(c.withLocks({ '\ud800': 'X' }, { limits: { gpu: 1 }, wait: 0 }, fn), {
		code: 'LR_EINVAL',
		message: /^locks\./,
	});
	assert.equal(ran, 0);
	const keys = await etcdctl(m.endpoint, 'get', '--prefix', prefix, '--keys-only');
	assert.equal(keys.trim(), '');
});
