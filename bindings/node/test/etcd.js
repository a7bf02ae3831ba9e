// etcd.js - a real etcd for each test: one member on free loopback ports
// with a temporary data directory, stopped and removed afterwards, as the
// C harness (tests/harness/) does. Health is asked of etcdctl, so the
// helper shares no code with the client under test.
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, openSync, closeSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import { onEnd } from './cleanup.js';

const live = new Set();
// Whatever happens to the test process, its members die with it.
process.on('exit', () => {
	for (const child of live) child.kill('SIGKILL');
});

function freePort() {
	return new Promise((resolve, reject) => {
		const srv = createServer();
		srv.unref();
		srv.on('error', reject);
		srv.listen(0, '127.0.0.1', () => {
			const { port } = srv.address();
			srv.close(() => resolve(port));
		});
	});
}

function healthy(endpoint) {
	return new Promise((resolve) => {
		execFile(
			'etcdctl',
			[`--endpoints=http://${endpoint}`, '--dial-timeout=1s', '--command-timeout=1s', 'endpoint', 'health'],
			{ env: { ...process.env, ETCDCTL_API: '3' } },
			(err) => resolve(!err),
		);
	});
}

/** etcdctl with arguments against the member; resolves to its stdout. */
export function etcdctl(endpoint, ...args) {
	return new Promise((resolve, reject) => {
		execFile(
			'etcdctl',
			[`--endpoints=http://${endpoint}`, ...args],
			{ env: { ...process.env, ETCDCTL_API: '3' } },
			(err, stdout, stderr) => (err ? reject(new Error(`etcdctl ${args.join(' ')}: ${stderr}`)) : resolve(stdout)),
		);
	});
}

class Member {
	constructor(child, dir, endpoint) {
		this.child = child;
		this.dir = dir;
		this.endpoint = endpoint;
		this.exited = new Promise((resolve) => child.once('exit', resolve));
	}

	/** SIGSTOP: it keeps its sockets and answers nothing. */
	pause() {
		this.child.kill('SIGSTOP');
	}

	resume() {
		this.child.kill('SIGCONT');
	}

	/** SIGTERM (SIGKILL after 10 s), then remove its directory. */
	async stop() {
		if (this.child.exitCode === null && this.child.signalCode === null) {
			this.child.kill('SIGCONT');
			this.child.kill('SIGTERM');
			const timer = setTimeout(() => this.child.kill('SIGKILL'), 10000);
			await this.exited;
			clearTimeout(timer);
		}
		live.delete(this.child);
		rmSync(this.dir, { recursive: true, force: true });
	}

	etcdctl(...args) {
		return etcdctl(this.endpoint, ...args);
	}
}

async function startOnce() {
	const [client, peer] = [await freePort(), await freePort()];
	const dir = mkdtempSync(join(tmpdir(), 'etcdh-node-'));
	const log = openSync(join(dir, 'etcd.log'), 'w');
	const child = spawn(
		'etcd',
		[
			'--name=m0',
			`--data-dir=${join(dir, 'data')}`,
			`--listen-client-urls=http://127.0.0.1:${client}`,
			`--advertise-client-urls=http://127.0.0.1:${client}`,
			`--listen-peer-urls=http://127.0.0.1:${peer}`,
			`--initial-advertise-peer-urls=http://127.0.0.1:${peer}`,
			`--initial-cluster=m0=http://127.0.0.1:${peer}`,
			'--initial-cluster-token=leaserun-node-test',
			'--initial-cluster-state=new',
			// Leases of 2 s are possible, as in the C tests.
			'--heartbeat-interval=100',
			'--election-timeout=1000',
			'--logger=zap',
			'--log-outputs=stderr',
			'--log-level=error',
		],
		{ stdio: ['ignore', log, log] },
	);
	closeSync(log);
	live.add(child);
	const m = new Member(child, dir, `127.0.0.1:${client}`);
	const deadline = Date.now() + 20000;
	while (Date.now() < deadline && child.exitCode === null) {
		if (await healthy(m.endpoint)) return m;
		await sleep(100);
	}
	const tail = readFileSync(join(dir, 'etcd.log'), 'utf8').slice(-2000);
	await m.stop();
	throw new Error(`etcd did not start on ${m.endpoint}: ${tail}`);
}

/** Start a member for test context t (stopped when the test ends). A port
 * taken meanwhile by another process costs a retry with new ports. */
export async function startEtcd(t) {
	let last;
	for (let i = 0; i < 3; i++) {
		try {
			const m = await startOnce();
			onEnd(t, () => m.stop());
			return m;
		} catch (err) {
			last = err;
		}
	}
	throw last;
}
