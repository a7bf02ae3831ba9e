// runner.test.js - Runner with JavaScript handlers against a real etcd:
// state between steps, retries and Fail, checkpoints, cancel, events,
// shared writes, concurrency, and a graceful stop by SIGTERM.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readdirSync, readlinkSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

import LeaseRun, { Fail, Runner } from '../lib/index.js';
import native from '../lib/native.js';
import { startEtcd } from './etcd.js';
import { connect, onEnd, quietLog, spec, startRunner, waitDone, waitFor } from './helpers.js';

// A process running test/fixtures/name with args (node flags first),
// its stdout piped; killed when test t ends.
function fixture(t, name, args, flags = []) {
	const file = fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url));
	const child = spawn(process.execPath, [...flags, file, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
	onEnd(t, () => child.kill('SIGKILL'));
	return child;
}

test('each step sees the state the previous one committed, and its own context', async (t) => {
	const c = await connect(t, await startEtcd(t));
	const seen = [];
	startRunner(t, c, { name: 'ctx', concurrency: 2 }, (r) => {
		r.handle('plan', async (step) => {
			seen.push({ ...step, state: structuredClone(step.state), spec: step.spec, env: step.env });
			step.state.plan = ['a', 'b'];
		});
		r.handle('act', async (step) => {
			seen.push({ ...step, state: structuredClone(step.state) });
			step.state = { ...step.state, done: step.state.plan.length };
		});
		r.handle('report', async (step) => {
			seen.push({ ...step, state: structuredClone(step.state) });
		});
	});
	await c.submit(spec('t1', ['plan', 'act', 'report'], { state: { topic: 'x' }, env: { MODEL: 'small' } }));
	assert.equal((await waitDone(c, 't1')).state, 'succeeded');
	assert.deepEqual(seen.map((s) => s.name), ['plan', 'act', 'report']);
	assert.deepEqual(seen.map((s) => s.index), [0, 1, 2]);
	assert.deepEqual(seen[0].state, { topic: 'x' });
	assert.deepEqual(seen[1].state, { topic: 'x', plan: ['a', 'b'] });
	assert.deepEqual(seen[2].state, { topic: 'x', plan: ['a', 'b'], done: 2 });
	const first = seen[0];
	assert.equal(first.taskId, 't1');
	assert.equal(first.count, 3);
	assert.equal(first.attempt, 1);
	assert.equal(first.runner, 'ctx');
	assert.ok(first.fence > 0);
	assert.deepEqual(first.spec, { name: 'plan', run: '-', timeout_s: 0 });
	assert.deepEqual(first.env, { MODEL: 'small' });
	assert.ok(seen.every((s) => s.fence === first.fence)); // one claim
});

test('a handler that throws is retried; LeaseRun.Fail ends the task failed at once', async (t) => {
	const c = await connect(t, await startEtcd(t));
	const attempts = { flaky: [], hopeless: 0 };
	startRunner(t, c, { name: 'fails' }, (r) => {
		r.handle('flaky', async (step) => {
			attempts.flaky.push(step.attempt);
			if (step.attempt < 3) throw new Error(`not yet (${step.attempt})`);
		});
		r.handle('hopeless', async () => {
			attempts.hopeless += 1;
			throw new LeaseRun.Fail('the input is malformed');
		});
	});
	await c.submit(spec('flaky', ['flaky'], { retry_backoff_ms: 10 }));
	await c.submit(spec('hopeless', ['hopeless'], { retry_backoff_ms: 10 }));
	assert.equal((await waitDone(c, 'flaky')).state, 'succeeded');
	assert.deepEqual(attempts.flaky, [1, 2, 3]);
	const failed = await waitDone(c, 'hopeless');
	assert.equal(failed.state, 'failed');
	assert.match(failed.error, /the input is malformed/);
	assert.equal(attempts.hopeless, 1);
	assert.ok(new Fail('x') instanceof Error);
});

test('a thrown value with no string form still ends the attempt, with a fixed text', async (t) => {
	const c = await connect(t, await startEtcd(t));
	const { runner, done } = startRunner(t, c, { name: 'odd-throws' }, (r) => {
		r.handle('bare', async () => {
			throw Object.create(null);
		});
		r.handle('getter', async () => {
			const err = new Error('unseen');
			Object.defineProperty(err, 'message', {
				get() {
					throw new Error('no message for you');
				},
			});
			throw err;
		});
		r.handle('nul', async () => {
			throw new Error('a\0b');
		});
	});
	for (const name of ['bare', 'getter', 'nul']) await c.submit(spec(name, [name], { max_attempts: 1 }));
	const errors = {};
	for (const name of ['bare', 'getter', 'nul']) {
		const st = await waitDone(c, name, 8000);
		assert.equal(st.state, 'failed', name);
		errors[name] = st.error;
	}
	assert.match(errors.bare, /no message/);
	assert.match(errors.getter, /no message/);
	assert.match(errors.nul, /a\\0b/);
	// Nothing is left running: the runner stops at once.
	runner.stop();
	await done;
});

test('a retried attempt starts from the last checkpoint, not from what followed it', async (t) => {
	const c = await connect(t, await startEtcd(t));
	const starts = [];
	startRunner(t, c, { name: 'ckpt' }, (r) => {
		r.handle('count', async (step) => {
			starts.push(structuredClone(step.state));
			if (step.attempt === 1) {
				step.state.i = 5;
				await step.checkpoint();
				step.state.after = true; // never checkpointed
				throw new Error('crash after the checkpoint');
			}
			step.state.i += 1;
		});
	});
	await c.submit(spec('c1', ['count'], { state: { i: 0 }, retry_backoff_ms: 10 }));
	assert.equal((await waitDone(c, 'c1')).state, 'succeeded');
	assert.deepEqual(starts, [{ i: 0 }, { i: 5 }]);
});

test('a state that is not JSON fails the attempt with a clear error', async (t) => {
	const c = await connect(t, await startEtcd(t));
	startRunner(t, c, { name: 'badstate' }, (r) => {
		r.handle('bad', async (step) => {
			step.state = { n: 10n }; // BigInt: JSON.stringify throws
		});
	});
	await c.submit(spec('b1', ['bad'], { max_attempts: 1 }));
	const st = await waitDone(c, 'b1');
	assert.equal(st.state, 'failed');
	assert.match(st.error, /BigInt/);
});

test('a state JSON has no text for fails the attempt, never commits the old one; undefined is null', async (t) => {
	const c = await connect(t, await startEtcd(t));
	const seen = {};
	startRunner(t, c, { name: 'notext' }, (r) => {
		r.handle('fn', async (step) => {
			step.state = () => 1;
		});
		r.handle('sym', async (step) => {
			step.state = Symbol('s');
		});
		r.handle('ckpt', async (step) => {
			step.state = () => 1;
			seen.checkpoint = await step.checkpoint().then(
				() => 'resolved',
				(err) => `${err.name} ${err.code}: ${err.message}`,
			);
			step.state = undefined;
		});
		r.handle('read', async (step) => {
			seen.after = step.state;
		});
	});
	await c.submit(spec('f1', ['fn'], { state: { old: true }, max_attempts: 1 }));
	await c.submit(spec('s1', ['sym'], { state: { old: true }, max_attempts: 1 }));
	await c.submit(spec('u1', ['ckpt', 'read'], { state: { old: true } }));
	const f1 = await waitDone(c, 'f1');
	assert.equal(f1.state, 'failed');
	assert.match(f1.error, /step\.state is not JSON \(a function\)/);
	const s1 = await waitDone(c, 's1');
	assert.equal(s1.state, 'failed');
	assert.match(s1.error, /step\.state is not JSON \(a symbol\)/);
	assert.equal((await waitDone(c, 'u1')).state, 'succeeded');
	assert.equal(seen.checkpoint, 'LeaseRunError LR_EINVAL: step.state is not JSON (a function)');
	assert.equal(seen.after, null);
});

test('cancel fires step.signal at once and ends the task cancelled', async (t) => {
	const c = await connect(t, await startEtcd(t));
	let started = false;
	let abortedAfter = -1;
	let t0 = 0;
	let reason;
	let checkpointed;
	let stopping;
	startRunner(t, c, { name: 'cancel' }, (r) => {
		r.handle('wait', async (step) => {
			started = true;
			await new Promise((resolve) => step.signal.addEventListener('abort', resolve));
			abortedAfter = Date.now() - t0;
			reason = step.signal.reason;
			stopping = await c.status('long'); // the holder has not ended it yet
			checkpointed = await step.checkpoint().then(() => 'committed', (err) => err);
		});
	});
	await c.submit(spec('long', ['wait']));
	await waitFor(() => started);
	assert.equal((await c.status('long')).cancelRequestedAt, null);
	t0 = Date.now();
	await c.cancel('long');
	const done = await waitDone(c, 'long');
	assert.equal(done.state, 'cancelled');
	assert.equal(done.cancelRequestedAt, null); // over once it ended
	assert.equal(stopping.state, 'running');
	assert.match(stopping.cancelRequestedAt, /^\d{4}-\d\d-\d\dT/);
	// Checked here: a failed assertion in the handler would only retry it.
	await waitFor(() => checkpointed, 5000, 'the handler to end');
	assert.equal(reason.code, 'LR_ECANCELLED');
	assert.match(reason.message, /^task long, step wait: the step was stopped: the task was cancelled$/);
	assert.equal(checkpointed.code, 'LR_ECANCELLED');
	t.diagnostic(`the handler saw the cancel ${abortedAfter} ms after the request`);
	assert.ok(abortedAfter >= 0 && abortedAfter < 1000, `aborted after ${abortedAfter} ms`);
});

test('a step used after its handler returned is refused, naming its task and step', async (t) => {
	const c = await connect(t, await startEtcd(t));
	let kept;
	startRunner(t, c, { name: 'late' }, (r) => {
		r.handle('once', async (step) => {
			kept = step;
		});
	});
	await c.submit(spec('over', ['once']));
	assert.equal((await waitDone(c, 'over')).state, 'succeeded');
	const over = { code: 'LR_ECANCELLED', message: 'task over, step once: the step is over' };
	await assert.rejects(kept.checkpoint(), over);
	await assert.rejects(kept.sharedPut({ late: 1 }), over);
	assert.equal(await c.shared.get('late'), undefined);
});

test('events, statistics and log records come from the runner', async (t) => {
	const c = await connect(t, await startEtcd(t));
	const events = [];
	const records = [];
	const { runner } = startRunner(t, c, { name: 'watched', log: quietLog(records) }, (r) => {
		r.handle('a', async (step) => step.log('working on a'));
		r.handle('b', async () => {});
		for (const e of ['claimed', 'stepCommitted', 'taskDone'])
			r.on(e, (data) => events.push([e, data]));
	});
	await c.submit(spec('e1', ['a', 'b']));
	await waitFor(() => events.some(([e]) => e === 'taskDone'));
	assert.deepEqual(events.map(([e]) => e), ['claimed', 'stepCommitted', 'taskDone']);
	assert.equal(events[0][1].taskId, 'e1');
	assert.ok(events[0][1].fence > 0);
	assert.deepEqual(events[1][1], { taskId: 'e1', step: 0, name: 'a' });
	assert.deepEqual(events[2][1], { taskId: 'e1', state: 'succeeded', error: null });
	const line = records.find((r) => r.msg === 'working on a');
	assert.ok(line, 'the step log line reached the log function');
	assert.deepEqual([line.task, line.step, line.stepIndex, line.runner, line.level], ['e1', 'a', 0, 'watched', 'info']);
	const s = runner.stats();
	assert.equal(s.claimsWon, 1);
	assert.equal(s.tasksSucceeded, 1);
	assert.equal(s.stepsCommitted, 1);
	assert.equal(s.claim.count, 1);
});

test('checkpoint and sharedPut reject, never throw, on values that are not JSON', async (t) => {
	const c = await connect(t, await startEtcd(t));
	const outcomes = [];
	startRunner(t, c, { name: 'rejecter' }, (r) => {
		r.handle('bad', async (step) => {
			const circular = {};
			circular.self = circular;
			const calls = [
				() => ((step.state = { n: 10n }), step.checkpoint()),
				() => ((step.state = circular), step.checkpoint()),
				() => step.sharedPut({ 'big.n': 10n }),
				() => step.sharedPut({ 'loop.a': circular }),
				() => step.sharedPut(null),
				() => step.sharedPut({ 'undef.a': undefined }),
				() => step.sharedPut({ 'fn.a': () => 1 }),
			];
			for (const call of calls) {
				let promise;
				try {
					promise = call();
				} catch (err) {
					outcomes.push(`threw ${err.name}`);
					continue;
				}
				outcomes.push(await promise.then(() => 'resolved', (err) =>
					`rejected ${err.name}${err.code === 'LR_EINVAL' ? `: ${err.message}` : ''}`));
			}
			step.state = {};
		});
	});
	await c.submit(spec('r1', ['bad']));
	assert.equal((await waitDone(c, 'r1')).state, 'succeeded');
	assert.deepEqual(outcomes, [...Array(5).fill('rejected TypeError'),
		'rejected LeaseRunError: sharedPut: the value of undef.a is not JSON (undefined)',
		'rejected LeaseRunError: sharedPut: the value of fn.a is not JSON (function)']);
	assert.deepEqual(await c.shared.list('', { keysOnly: true }), []);
});

test("a step's shared writes are read back by the client", async (t) => {
	const c = await connect(t, await startEtcd(t));
	let badName;
	startRunner(t, c, { name: 'sharer' }, (r) => {
		r.handle('share', async (step) => {
			await step.sharedPut({ 'notes.a': { fence: step.fence }, 'notes.b': [1, 'two'] });
			badName = await step.sharedPut({ 'bad/name': 1 }).then(() => 'stored', (err) => err);
		});
	});
	await c.submit(spec('s1', ['share']));
	assert.equal((await waitDone(c, 's1')).state, 'succeeded');
	assert.equal(badName.code, 'LR_EINVAL');
	assert.deepEqual(await c.shared.get('notes.b'), [1, 'two']);
	const list = await c.shared.list('notes.');
	assert.deepEqual(list.map((e) => e.name), ['notes.a', 'notes.b']);
	assert.equal(list[0].modRevision, list[1].modRevision); // one txn
	assert.ok(list[0].value.fence > 0);
	assert.equal(await c.shared.delete('notes.', { prefix: true }), 2);
});

test('a NUL character in a name or id is refused, never cut short', async (t) => {
	const c = await connect(t, await startEtcd(t));
	let refused;
	startRunner(t, c, { name: 'nul' }, (r) => {
		r.handle('put', async (step) => {
			await step.sharedPut({ 'keep.a': 1, evil: 0 });
			try {
				await step.sharedPut({ 'evil\0/../x': 42 });
			} catch (err) {
				refused = err;
			}
		});
	});
	await c.submit(spec('n1', ['put']));
	assert.equal((await waitDone(c, 'n1')).state, 'succeeded');
	assert.ok(refused instanceof TypeError, `sharedPut gave ${refused}`);
	assert.match(refused.message, /^name: .*NUL/);
	assert.equal(await c.shared.get('evil'), 0);
	const nul = (what) => ({ name: 'TypeError', message: new RegExp(`^${what}: .*NUL`) });
	await assert.rejects(c.status('n1\0garbage'), nul('id'));
	await assert.rejects(c.cancel('n1\0'), nul('id'));
	await assert.rejects(c.submit(spec('n2', ['put']), { id: 'n2\0x' }), nul('id'));
	await assert.rejects(c.shared.get('evil\0x'), nul('name'));
	await assert.rejects(c.shared.list('\0'), nul('prefix'));
	await assert.rejects(c.shared.delete('\0', { prefix: true }), nul('name'));
	assert.deepEqual((await c.shared.list('')).map((e) => e.name), ['evil', 'keep.a']);
});

test('steps of several tasks run at once on the event loop', async (t) => {
	const c = await connect(t, await startEtcd(t));
	let inside = 0;
	let most = 0;
	let release;
	const gate = new Promise((resolve) => {
		release = resolve;
	});
	startRunner(t, c, { name: 'wide', concurrency: 4 }, (r) => {
		r.handle(null, async () => {
			inside += 1;
			most = Math.max(most, inside);
			await gate;
			inside -= 1;
		});
	});
	for (let i = 0; i < 4; i++) await c.submit(spec(`w${i}`, ['any']));
	await waitFor(() => inside === 4, 10000, 'four handlers at once');
	release();
	for (let i = 0; i < 4; i++) assert.equal((await waitDone(c, `w${i}`)).state, 'succeeded');
	assert.equal(most, 4);
});

test('a step with no handler fails its task, naming the step; handle() is refused once running', async (t) => {
	const c = await connect(t, await startEtcd(t));
	const { runner } = startRunner(t, c, { name: 'partial' }, (r) => r.handle('known', async () => {}));
	assert.throws(() => runner.handle('late', async () => {}), /started already/);
	assert.throws(() => new Runner({}), TypeError);
	await c.submit(spec('u1', ['known', 'unknown']));
	const st = await waitDone(c, 'u1');
	assert.equal(st.state, 'failed');
	assert.match(st.error, /unknown/);
});

test('handle() refuses a step name that is not a string, naming it', async (t) => {
	const c = await connect(t, await startEtcd(t));
	const r = new Runner(c, { name: 'names', stopOnSignals: false });
	assert.throws(() => r.handle(5, async () => {}), {
		name: 'TypeError',
		message: /^handle\(\): the step name must be a string, null or '\*', not number 5$/,
	});
	assert.throws(() => r.handle(Object.create(null), async () => {}), { name: 'TypeError', message: /not object$/ });
	assert.throws(() => r.handle('a\0b', async () => {}), { name: 'TypeError', message: /"a\\u0000b" holds a NUL/ });
	r.handle('fine', async () => {}).handle(null, async () => {});
});

test("the addon's run() registers no handler when one of its step names is bad", async (t) => {
	const c = await connect(t, await startEtcd(t));
	const n = new native.NativeRunner(c._native, { name: 'native', ttl: 2, grace: 1, log: true });
	const dispatched = [];
	const hooks = {
		dispatch: (handle, info) => {
			dispatched.push(info.stepName);
			handle.finish(0, '{}', null);
		},
		log: () => {},
	};
	assert.throws(() => n.run(['early', 'bad\0'], false, hooks), { name: 'TypeError', message: /^step name: .*NUL/ });
	const done = n.run(['late'], false, hooks);
	onEnd(t, async () => {
		n.stop();
		await done;
	});
	await c.submit(spec('e1', ['early']));
	const st = await waitDone(c, 'e1');
	assert.equal(st.state, 'failed');
	assert.match(st.error, /early/);
	assert.deepEqual(dispatched, []);
});

test('SIGTERM stops a runner process gracefully: the step is aborted and released at once', async (t) => {
	const m = await startEtcd(t);
	const c = await connect(t, m, '/sigterm/');
	const child = fixture(t, 'waiting-runner.js', [m.endpoint, '/sigterm/', 'first']);
	const lines = [];
	createInterface({ input: child.stdout }).on('line', (l) => lines.push(JSON.parse(l)));
	await c.submit(spec('g1', ['wait']));
	await waitFor(() => lines.some((l) => l.started), 10000, 'the step to start');
	const t0 = Date.now();
	child.kill('SIGTERM');
	const [code] = await once(child, 'exit');
	const took = Date.now() - t0;
	assert.equal(code, 0);
	assert.ok(lines.some((l) => l.aborted), 'the step signal fired');
	assert.ok(lines.some((l) => l.exited === 'cleanly'));
	t.diagnostic(`the runner process exited ${took} ms after SIGTERM`);
	// Released, not left to expire: pending again with the attempt given back.
	const st = await c.status('g1');
	assert.equal(st.state, 'pending');
	assert.equal(st.attempt, 0);
	let attempt = 0;
	startRunner(t, c, { name: 'second' }, (r) =>
		r.handle('wait', async (step) => {
			attempt = step.attempt;
		}),
	);
	assert.equal((await waitDone(c, 'g1', 5000)).state, 'succeeded');
	assert.equal(attempt, 1);
});

test('a runner name held by a live runner is refused; a runner runs once', async (t) => {
	const c = await connect(t, await startEtcd(t));
	const { runner, done } = startRunner(t, c, { name: 'unique' }, (r) => r.handle(null, async () => {}));
	await waitFor(async () => (await c.runners()).length === 1, 10000, 'the first runner');
	const twin = new Runner(c, { name: 'unique', stopOnSignals: false, log: quietLog() });
	twin.handle(null, async () => {});
	await assert.rejects(twin.run(), (err) => err.code === 'LR_EINUSE' && /unique/.test(err.message));
	await assert.rejects(runner.run(), /running already/);
	runner.stop();
	await done;
	await assert.rejects(runner.run(), /runs once/);
	// The name is free again once its runner stopped.
	const next = new Runner(c, { name: 'unique', stopOnSignals: false, log: quietLog() });
	next.handle(null, async () => {});
	const d = next.run();
	onEnd(t, async () => {
		next.stop();
		await d;
	});
	await c.submit(spec('again', ['any']));
	assert.equal((await waitDone(c, 'again')).state, 'succeeded');
});

test('a runner that stopped, and one that never ran, are garbage collected', async (t) => {
	const m = await startEtcd(t);
	const child = fixture(t, 'collected-runners.js', [m.endpoint, '/collected/', '3'], ['--expose-gc']);
	let out = '';
	child.stdout.on('data', (d) => (out += d));
	const [code] = await once(child, 'exit');
	assert.equal(code, 0);
	assert.deepEqual(JSON.parse(out), { collected: 4, made: 4 });
});

test("a step's eventfd is closed when the step ends, not when it is collected", async (t) => {
	const c = await connect(t, await startEtcd(t));
	const eventfds = () => readdirSync('/proc/self/fd').filter((fd) => {
		try {
			return readlinkSync(`/proc/self/fd/${fd}`) === 'anon_inode:[eventfd]';
		} catch {
			return false; // the directory's own descriptor, gone by now
		}
	}).length;
	const handles = []; // kept: nothing is collected
	startRunner(t, c, { name: 'fds', concurrency: 4 }, (r) => {
		r.handle('noop', async (step) => {
			handles.push(step);
		});
	});
	await c.submit(spec('fd-0', ['noop']));
	await waitDone(c, 'fd-0');
	const before = eventfds();
	for (let i = 1; i <= 20; i++) await c.submit(spec(`fd-${i}`, ['noop']));
	for (let i = 1; i <= 20; i++) await waitDone(c, `fd-${i}`);
	await sleep(100); // the last steps' worker threads let go
	assert.equal(handles.length, 21);
	assert.ok(eventfds() - before < 4, `${eventfds() - before} more eventfds after 20 steps`);
});

test('integers beyond 64 bits and lone surrogates pass through spec, state and shared values', async (t) => {
	const c = await connect(t, await startEtcd(t));
	// JSON.stringify writes 1e20 as 100000000000000000000 and a string cut
	// inside an emoji as "\ud83d": a strict JSON reader refuses both, and
	// the step would fail with "the state is not JSON".
	const cut = '😀'.slice(0, 1);
	const odd = { big: 1e20, neg: -(2 ** 64), safe: 2 ** 53, tiny: 1.25e-7, text: `a${cut}b`, [cut]: 1 };
	const seen = {};
	startRunner(t, c, { name: 'odd' }, (r) => {
		r.handle('first', async (step) => {
			seen.spec = structuredClone(step.state);
			step.state = { ...odd, more: 1e19 };
			await step.checkpoint();
			await step.sharedPut({ 'odd.v': odd });
		});
		r.handle('second', async (step) => {
			seen.committed = structuredClone(step.state);
		});
	});
	await c.submit(spec('odd-1', ['first', 'second'], { state: odd, max_attempts: 1 }));
	const st = await waitDone(c, 'odd-1');
	assert.equal(st.state, 'succeeded', st.error);
	// A lone surrogate becomes U+FFFD, as whenever Node.js writes UTF-8.
	const expected = { ...odd, text: 'a\ufffdb', '\ufffd': 1 };
	delete expected[cut];
	assert.deepEqual(seen.spec, expected);
	assert.deepEqual(seen.committed, { ...expected, more: 1e19 });
	assert.deepEqual(await c.shared.get('odd.v'), expected);
});

test('step.log writes a NUL as \\0 instead of failing the step', async (t) => {
	const c = await connect(t, await startEtcd(t));
	const records = [];
	startRunner(t, c, { name: 'lognul', log: quietLog(records) }, (r) => {
		r.handle('talk', async (step) => {
			step.log('tool output: a\0b');
		});
	});
	await c.submit(spec('ln-1', ['talk'], { max_attempts: 1 }));
	const st = await waitDone(c, 'ln-1');
	assert.equal(st.state, 'succeeded', st.error);
	assert.ok(records.some((rec) => rec.msg === 'tool output: a\\0b'), JSON.stringify(records));
});

test('sharedPut refuses a string or an array (no values named "0", "1"), storing nothing', async (t) => {
	const c = await connect(t, await startEtcd(t));
	const outcomes = [];
	startRunner(t, c, { name: 'shtypes' }, (r) => {
		r.handle('put', async (step) => {
			for (const v of ['ab', ['q'], 5]) {
				outcomes.push(await step.sharedPut(v).then(() => 'resolved', (err) => `${err.name}: ${err.message}`));
			}
		});
	});
	await c.submit(spec('sp-1', ['put']));
	assert.equal((await waitDone(c, 'sp-1')).state, 'succeeded');
	assert.deepEqual(outcomes, [
		'TypeError: sharedPut: expected an object or a Map of name -> value, not string',
		'TypeError: sharedPut: expected an object or a Map of name -> value, not an array',
		'TypeError: sharedPut: expected an object or a Map of name -> value, not number',
	]);
	assert.deepEqual(await c.shared.list('', { keysOnly: true }), []);
});

test('Runner options are checked where they are given; a stop() before run() is kept', async (t) => {
	const c = await connect(t, await startEtcd(t));
	assert.throws(() => new Runner(c, { ttl: NaN }), { name: 'RangeError', message: /^ttl: / });
	assert.throws(() => new Runner(c, { name: 5 }), { name: 'TypeError', message: /^name: / });
	assert.throws(() => new Runner(c, { name: 'a/b' }), { code: 'LR_EINVAL', message: /runner name/ });
	// A switch given as the string 'false' would be on.
	for (const flag of ['exitWhenIdle', 'stopOnSignals'])
		assert.throws(() => new Runner(c, { [flag]: 'false' }), { name: 'TypeError', message: new RegExp(`^Runner: ${flag} must be true or false`) });
	// A stop asked for while the process is still setting up (a SIGTERM
	// handler of its own) must not be lost: run() ends at once.
	const runner = new Runner(c, { name: 'early-stop', ttl: 2, stopOnSignals: false, log: quietLog() });
	runner.handle(null, async () => {});
	runner.stop();
	let settled = false;
	const done = runner.run().then(() => (settled = true));
	onEnd(t, async () => {
		runner.stop();
		await done;
	});
	await waitFor(() => settled, 5000, 'run() to end after an early stop()');
});
