// resume.test.js - the example agent graph (examples/agent-graph.js) killed
// mid-graph with SIGKILL is resumed by another runner process from its last
// checkpoint: nodes whose super-step was checkpointed, and a finished
// parallel node whose writes were saved, do not run again.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { submitRun, waitRun } from '../lib/langgraph.js';
import { startEtcd } from './etcd.js';
import { connect, onEnd, waitFor } from './helpers.js';

const example = fileURLToPath(new URL('../examples/agent-graph.js', import.meta.url));

function readLog(path) {
	let text = '';
	try {
		text = readFileSync(path, 'utf8');
	} catch {
		return [];
	}
	return text.split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

test('a graph run killed mid-graph resumes on another runner from its last checkpoint', async (t) => {
	const m = await startEtcd(t);
	const prefix = '/resume/';
	const c = await connect(t, m, prefix);
	const dir = mkdtempSync(join(tmpdir(), 'agent-graph-'));
	onEnd(t, () => rmSync(dir, { recursive: true, force: true }));
	const log = join(dir, 'nodes.log');
	const env = {
		...process.env,
		LEASERUN_ENDPOINTS: m.endpoint,
		LEASERUN_PREFIX: prefix,
		AGENT_LOG: log,
		AGENT_STEP_MS: '300', // draft: 900 ms, research: 300 ms
	};
	const runner = (name) => {
		const child = spawn(process.execPath, [example, 'run', '--name', name, '--ttl', '2'], {
			env,
			stdio: ['ignore', 'ignore', 'ignore'],
		});
		onEnd(t, async () => {
			if (child.exitCode === null && child.signalCode === null) {
				child.kill('SIGTERM');
				await once(child, 'exit');
			}
		});
		return child;
	};

	const ada = runner('ada');
	const run = await submitRun(c, 'agent', 'essay-1', { input: { topic: 'leases' } });
	// research ends while draft still works; kill once research's writes
	// are in etcd, so that only draft is lost.
	await waitFor(
		async () =>
			(await c.shared.list('lg.essay-1._.w.')).some((w) => w.value.value.text?.includes('research:')),
		20000,
		"research's saved writes",
	);
	ada.kill('SIGKILL');
	await once(ada, 'exit');
	const before = readLog(log);
	assert.ok(
		before.some((l) => l.node === 'draft' && l.event === 'start') &&
			!before.some((l) => l.node === 'draft' && l.event === 'end'),
		`draft must be under way at the kill: ${JSON.stringify(before)}`,
	);

	const t0 = Date.now();
	runner('bob');
	const st = await waitRun(c, run.id, { timeoutMs: 30000 });
	t.diagnostic(`finished ${Date.now() - t0} ms after the kill, attempt ${st.attempt}`);
	assert.equal(st.state, 'succeeded');
	assert.equal(st.attempt, 2);

	const lines = readLog(log);
	const starts = (node) => lines.filter((l) => l.node === node && l.event === 'start');
	const adaPid = ada.pid;
	// Checkpointed before the kill: never again.
	assert.equal(starts('plan').length, 1);
	assert.equal(starts('research').length, 1);
	assert.equal(starts('research')[0].pid, adaPid);
	// Interrupted by the kill: run again, by the second runner.
	assert.equal(starts('draft').length, 2);
	assert.notEqual(starts('draft')[1].pid, adaPid);
	// After the kill: once each, by the second runner.
	for (const node of ['review', 'publish']) {
		assert.equal(starts(node).length, 1, node);
		assert.notEqual(starts(node)[0].pid, adaPid);
	}
	const final = await c.shared.list('lg.essay-1._.c.');
	const last = final[final.length - 1].value;
	assert.equal(last.run, run.id);
	assert.match(last.checkpoint.text, /A note on leases\. ok \(2 notes\)/);
});
