#!/usr/bin/env node
// bench.js - what a step costs through the Node.js binding compared with
// the C API, and how much memory a Node.js runner takes.
//
//   node bench/bench.js [--tasks N] [--steps S] [--concurrency C] [--json]
//
// Each side gets a fresh private etcd (etcd slows down with the history it
// keeps, so sharing one would favour whichever runs first):
//   C      `leaserun bench --tasks N --steps S --concurrency C`: in-process
//          runners with a no-op C handler (build/runner/leaserun)
//   Node   the same N tasks of S steps, submitted first, then run by one
//          Runner of concurrency C whose handlers are empty async functions
// tasks/s is measured from the runner's start to the last task's end, CPU
// per task is the whole process's, as leaserun bench counts them. RSS is
// this process's: node alone, with the addon and a client, a runner idle,
// and the most seen while the tasks ran; beside it an idle C runner
// (`leaserun worker`) of the same concurrency.
import { execFile, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { startEtcd } from '../test/etcd.js';

const rssMb = () => process.memoryUsage().rss / (1 << 20);
const rssAtStart = rssMb();

const here = dirname(fileURLToPath(import.meta.url));
const { values: opt } = parseArgs({
	options: {
		tasks: { type: 'string', default: '2000' },
		steps: { type: 'string', default: '1' },
		concurrency: { type: 'string', default: '16' },
		leaserun: { type: 'string', default: join(here, '..', '..', '..', 'build', 'runner', 'leaserun') },
		json: { type: 'boolean', default: false },
	},
});
const N = Number(opt.tasks);
const S = Number(opt.steps);
const C = Number(opt.concurrency);

// A private etcd, stopped by the returned function.
async function etcd() {
	const stops = [];
	const m = await startEtcd({ after: (fn) => stops.push(fn) });
	return { m, stop: async () => { for (const fn of stops.reverse()) await fn(); } };
}

function run(cmd, args) {
	return new Promise((resolve, reject) =>
		execFile(cmd, args, { maxBuffer: 1 << 24 }, (err, stdout, stderr) =>
			err ? reject(new Error(`${cmd} ${args.join(' ')}: ${stderr || err.message}`)) : resolve(stdout),
		),
	);
}

async function benchC() {
	const { m, stop } = await etcd();
	try {
		const out = await run(opt.leaserun, [
			'bench', '--endpoints', m.endpoint, '--tasks', String(N), '--steps', String(S),
			'--concurrency', String(C), '--raw-seconds', '2', '--json',
		]);
		return JSON.parse(out);
	} finally {
		await stop();
	}
}

// RSS of an idle `leaserun worker` of concurrency C, once registered.
async function idleWorkerRssMb() {
	const { m, stop } = await etcd();
	const child = spawn(opt.leaserun, ['worker', '--endpoints', m.endpoint, '--concurrency', String(C)], {
		stdio: 'ignore',
	});
	try {
		await sleep(1500);
		const status = readFileSync(`/proc/${child.pid}/status`, 'utf8');
		return Number(status.match(/VmRSS:\s+(\d+) kB/)[1]) / 1024;
	} finally {
		child.kill('SIGTERM');
		await new Promise((resolve) => child.once('exit', resolve));
		await stop();
	}
}

async function benchNode() {
	const { Client, Runner } = await import('../lib/index.js');
	const { m, stop } = await etcd();
	try {
		const client = await Client.connect({ endpoints: m.endpoint, prefix: '/bench-node/' });
		const rssClient = rssMb();
		const steps = Array.from({ length: S }, (_, i) => ({ name: `s${i}`, run: 'noop' }));
		// Submitted first, C at a time, as leaserun bench does.
		let next = 0;
		await Promise.all(
			Array.from({ length: C }, async () => {
				while (next < N) await client.submit({ id: `t${next++}`, steps });
			}),
		);
		const runner = new Runner(client, { name: 'bench-node', concurrency: C, grace: 1, logLevel: 'warn' });
		runner.handle(null, async () => {});
		let finished = 0;
		let resolveAll;
		const all = new Promise((resolve) => {
			resolveAll = resolve;
		});
		runner.on('taskDone', () => {
			finished += 1;
			if (finished === N) resolveAll(process.hrtime.bigint());
		});
		let rssPeak = 0;
		const sampler = setInterval(() => {
			rssPeak = Math.max(rssPeak, rssMb());
		}, 50);
		const cpu0 = process.cpuUsage();
		const t0 = process.hrtime.bigint();
		const done = runner.run();
		const t1 = await all;
		const cpu = process.cpuUsage(cpu0);
		clearInterval(sampler);
		const seconds = Number(t1 - t0) / 1e9;
		runner.stop();
		await done;
		// Idle: a runner with nothing to do, after the work.
		const idle = new Runner(client, { name: 'bench-idle', concurrency: C, logLevel: 'warn' });
		idle.handle(null, async () => {});
		const idleDone = idle.run();
		await sleep(1500);
		const rssIdle = rssMb();
		idle.stop();
		await idleDone;
		client.close();
		const st = runner.stats();
		return {
			tasks_per_s: N / seconds,
			cpu_us_per_task: (cpu.user + cpu.system) / N,
			claim_p50_ms: st.claim.p50Ms,
			completion_p50_ms: st.completion.p50Ms,
			rss_client_mb: rssClient,
			rss_runner_idle_mb: rssIdle,
			rss_peak_mb: rssPeak,
		};
	} finally {
		await stop();
	}
}

const c = await benchC();
const node = await benchNode();
const workerRss = await idleWorkerRssMb();
const perTask = (tps) => (1e6 * C) / tps; // µs a task holds one of the C slots
const result = {
	tasks: N,
	steps: S,
	concurrency: C,
	c: { tasks_per_s: c.tasks_per_s, cpu_us_per_task: c.cpu_us_per_task, claim_p50_ms: c.claim_p50_ms },
	node,
	node_vs_c: node.tasks_per_s / c.tasks_per_s,
	node_extra_us_per_task: perTask(node.tasks_per_s) - perTask(c.tasks_per_s),
	node_extra_cpu_us_per_task: node.cpu_us_per_task - c.cpu_us_per_task,
	rss_node_alone_mb: rssAtStart,
	rss_c_worker_idle_mb: workerRss,
};
if (opt.json) {
	console.log(JSON.stringify(result, null, 2));
} else {
	const f = (v, d = 1) => v.toFixed(d);
	console.log(`${N} tasks of ${S} empty step(s), concurrency ${C}, one runner, fresh etcd each`);
	console.log(`  C API (leaserun bench)   ${f(c.tasks_per_s)} tasks/s   ${f(c.cpu_us_per_task)} µs CPU/task`);
	console.log(`  Node.js binding          ${f(node.tasks_per_s)} tasks/s   ${f(node.cpu_us_per_task)} µs CPU/task`);
	console.log(`  Node/C                   ${f(result.node_vs_c, 3)}`);
	console.log(`  per task through Node    ${f(result.node_extra_us_per_task)} µs more wall time in a slot, ` +
		`${f(result.node_extra_cpu_us_per_task)} µs more CPU`);
	console.log('RSS');
	console.log(`  node alone                ${f(rssAtStart)} MiB`);
	console.log(`  + addon and a client      ${f(node.rss_client_mb)} MiB`);
	console.log(`  Node runner idle          ${f(node.rss_runner_idle_mb)} MiB (concurrency ${C})`);
	console.log(`  Node runner under load    ${f(node.rss_peak_mb)} MiB (peak)`);
	console.log(`  C runner idle             ${f(workerRss)} MiB (leaserun worker --concurrency ${C})`);
}
