// client.test.js - Client against a real etcd: connecting, submit, status,
// list, cancel, runners, shared values.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Client, LeaseRunError, Runner } from '../lib/index.js';
import { startEtcd } from './etcd.js';
import { connect, onEnd, spec } from './helpers.js';

test('an unreachable cluster is reported within the dial timeout, naming the endpoint', async () => {
	const t0 = Date.now();
	await assert.rejects(Client.connect({ endpoints: '127.0.0.1:1', dialTimeout: 0.5 }), (err) => {
		assert.ok(err instanceof LeaseRunError);
		assert.equal(err.code, 'LR_EUNAVAILABLE');
		assert.match(err.message, /127\.0\.0\.1:1/);
		return true;
	});
	assert.ok(Date.now() - t0 < 2000, `took ${Date.now() - t0} ms`);
});

test('bad options are refused before anything is sent', async () => {
	await assert.rejects(Client.connect({ endpoints: '127.0.0.1:1', dialTimeout: -1 }), RangeError);
	await assert.rejects(Client.connect({ endpoints: 5 }), TypeError);
	await assert.rejects(Client.connect({ endpoints: '127.0.0.1:1', prefix: 'p'.repeat(201) }), {
		code: 'LR_EINVAL',
	});
});

test('options given as null mean none; options and maps of another type are refused, named', async (t) => {
	await assert.rejects(Client.connect(5), { name: 'TypeError', message: /^connect: options must be an object, not number/ });
	const m = await startEtcd(t);
	const c = await connect(t, m);
	assert.deepEqual(await c.submit(spec('n1', ['s']), null), { id: 'n1', created: true });
	assert.equal((await c.list(null)).length, 1);
	assert.deepEqual(await c.shared.list('', null), []);
	assert.equal(await c.shared.delete('x', null), 0);
	await assert.rejects(c.list('running'), { name: 'TypeError', message: /^list: options must be an object, not string/ });
	await assert.rejects(c.submit(spec('n2', ['s']), ['x']), { name: 'TypeError', message: /^submit: .*an array/ });
	const fn = () => 1;
	await assert.rejects(c.withLocks('x', fn), { name: 'TypeError', message: /^withLocks: locks must be an object, not string/ });
	await assert.rejects(c.withLocks({ a: 'X' }, { limits: 'x' }, fn), { name: 'TypeError', message: /^withLocks: limits must be/ });
	assert.throws(() => new Runner(c, { log: 5 }), { name: 'TypeError', message: /^Runner: log must be a function, not number/ });
	assert.equal(await c.withLocks(null, { limits: { gpu: 1 } }, fn), 1);
});

test('numbers C cannot take are refused, naming the option', async (t) => {
	const m = await startEtcd(t);
	const c = await connect(t, m);
	const refused = (name, v) => ({
		name: typeof v === 'number' ? 'RangeError' : 'TypeError',
		message: new RegExp(`^${name}: `),
	});
	for (const v of [Infinity, 1e300, NaN, 0, 3601, '4'])
		await assert.rejects(Client.connect({ endpoints: m.endpoint, dialTimeout: v }), refused('dialTimeout', v));
	for (const v of [-Infinity, 1e300])
		await assert.rejects(Client.connect({ endpoints: m.endpoint, callTimeout: v }), refused('callTimeout', v));
	const bad = {
		concurrency: [2 ** 32 + 2, NaN, 0, 1025, 1.5, '4'],
		ttl: [0.5, 0, Infinity, 86401],
		grace: [-5, 0.5, NaN],
	};
	for (const [name, values] of Object.entries(bad))
		for (const v of values)
			assert.throws(() => new Runner(c, { [name]: v }).stats(), refused(name, v), `${name} ${v}`);
	const fine = new Runner(c, { concurrency: 1024, ttl: 1, grace: 0 });
	assert.equal(fine.stats().claimsWon, 0);
});

test('options missing from the call come from LEASERUN_* variables', async (t) => {
	const m = await startEtcd(t);
	const saved = { ...process.env };
	onEnd(t, () => {
		process.env = saved;
	});
	process.env.LEASERUN_ENDPOINTS = m.endpoint;
	process.env.LEASERUN_PREFIX = '/from-env/';
	const c = await Client.connect();
	onEnd(t, () => c.close());
	assert.equal(c.prefix, '/from-env/');
	const d = await Client.connect({ prefix: '/given' });
	onEnd(t, () => d.close());
	assert.equal(d.prefix, '/given/'); // given beats the environment
});

test('submit stores a task once, status and list show it, cancel ends it', async (t) => {
	const m = await startEtcd(t);
	const c = await connect(t, m);
	const s = spec('report-1', ['ingest', 'analyse'], { state: { n: 1 } });
	assert.deepEqual(await c.submit(s), { id: 'report-1', created: true });
	assert.deepEqual(await c.submit(JSON.stringify(s)), { id: 'report-1', created: false });
	await assert.rejects(c.submit(spec('report-1', ['other'])), { code: 'LR_EEXIST' });
	await assert.rejects(c.submit({ steps: [{ name: 'x' }] }), (err) => {
		assert.equal(err.code, 'LR_EINVAL');
		assert.match(err.message, /run/); // names the missing field
		return true;
	});
	await assert.rejects(c.submit('{"steps": ['), (err) => err.code === 'LR_EINVAL' && /line 1/.test(err.message));
	const gen = await c.submit(spec(undefined, ['a']));
	assert.ok(gen.created && gen.id.length > 0);
	const { id } = await c.submit(spec(undefined, ['a']), { id: 'given-id' });
	assert.equal(id, 'given-id');

	const st = await c.status('report-1');
	assert.equal(st.state, 'pending');
	assert.equal(st.steps, 2);
	assert.equal(st.nextStep, 0);
	assert.equal(st.stepName, 'ingest');
	assert.equal(st.maxAttempts, 5);
	const all = await c.list();
	assert.deepEqual(all.map((x) => x.id).sort(), [gen.id, 'given-id', 'report-1'].sort());
	assert.equal((await c.list({ limit: 1 })).length, 1);
	assert.equal((await c.list({ state: 'running' })).length, 0);
	await assert.rejects(c.list({ state: 'sleeping' }), TypeError);

	assert.deepEqual(await c.cancel('report-1'), { already: null });
	assert.equal((await c.status('report-1')).state, 'cancelled');
	assert.deepEqual(await c.cancel('report-1'), { already: 'cancelled' });
	await assert.rejects(c.status('nope'), { code: 'LR_ENOTFOUND' });
	await assert.rejects(c.cancel('nope'), { code: 'LR_ENOTFOUND' });
});

test('shared values: absent reads, listing, deletion, bad names', async (t) => {
	const m = await startEtcd(t);
	const c = await connect(t, m);
	assert.equal(await c.shared.get('nothing.here'), undefined);
	assert.deepEqual(await c.shared.list('a.'), []);
	assert.equal(await c.shared.delete('a.', { prefix: true }), 0);
	// A missing name is no prefix of everything: every shared value goes
	// only when asked for in so many words.
	await assert.rejects(c.shared.delete(undefined, { prefix: true }),
		{ name: 'TypeError', message: /name must be a string, not undefined/ });
	await assert.rejects(c.shared.delete(null), { name: 'TypeError', message: /not null/ });
	await assert.rejects(c.shared.delete('', { prefix: true }), { name: 'TypeError', message: /all: true/ });
	assert.equal(await c.shared.delete('', { prefix: true, all: true }), 0);
	await assert.rejects(c.shared.get('has/slash'), { code: 'LR_EINVAL' });
	await assert.rejects(c.shared.list('bad prefix'), { code: 'LR_EINVAL' });
	// Written by a step elsewhere (runner.test.js); here only the reads.
});

test('a closed client refuses calls; calls in flight finish first', async (t) => {
	const m = await startEtcd(t);
	const c = await Client.connect({ endpoints: m.endpoint, prefix: '/closing/' });
	const inFlight = c.submit(spec('late', ['a']));
	c.close();
	assert.equal((await inFlight).id, 'late');
	await assert.rejects(() => c.status('late'), { code: 'LR_ECLOSED' });
	c.close(); // twice is harmless
});

test("list's limit is a whole number up to 1e9: others are refused, naming limit", async (t) => {
	const c = await connect(t, await startEtcd(t));
	await c.submit(spec('l1', ['a']));
	await c.submit(spec('l2', ['a']));
	// Each of these once wrapped to some other count, silently.
	for (const limit of [-1, 1.5, 2 ** 32 + 1, 1e9 + 1, NaN, Infinity])
		await assert.rejects(c.list({ limit }), { name: 'RangeError', message: /^limit: / }, `limit ${limit}`);
	await assert.rejects(c.list({ limit: '1' }), { name: 'TypeError', message: /^limit: / });
	assert.deepEqual((await c.list({ limit: 1e9 })).map((x) => x.id), ['l1', 'l2']);
	assert.deepEqual((await c.list({ limit: 1 })).map((x) => x.id), ['l1']);
	assert.equal((await c.list({ limit: 0 })).length, 2);
});

test('an empty id is refused like a bad one, never read as "generate one"', async (t) => {
	const c = await connect(t, await startEtcd(t));
	// A retried submit with id '' must not make a new task each time.
	await assert.rejects(c.submit(spec(undefined, ['a']), { id: '' }), { code: 'LR_EINVAL', message: /id/ });
	assert.deepEqual(await c.list(), []);
});

test('a spec given as bytes is read as UTF-8 JSON text; bytes that are not UTF-8 are refused', async (t) => {
	const c = await connect(t, await startEtcd(t));
	const bytes = Buffer.from(JSON.stringify(spec('bytes-1', ['a'], { state: { word: 'grüß' } })));
	assert.deepEqual(await c.submit(bytes), { id: 'bytes-1', created: true });
	assert.deepEqual(await c.submit(new Uint8Array(bytes)), { id: 'bytes-1', created: false });
	await assert.rejects(c.submit(Buffer.from([0x7b, 0xff, 0xfe, 0x7d])), {
		code: 'LR_EINVAL',
		message: /UTF-8/,
	});
	assert.deepEqual((await c.list()).map((s) => s.id), ['bytes-1']);
});
