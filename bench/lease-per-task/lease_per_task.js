#!/usr/bin/env node
// lease_per_task.js - the lease-per-task design leaserun replaced, on the
// etcd3 package, for a side-by-side run with `leaserun bench` (see
// bench/side-by-side): each task gets a lease of its own, a claim txn
// (version(claims/<id>) == 0, put the claim on the task's lease), a plain
// put of its status after each step, a put of its result, and the lease
// revoked. N no-op tasks of S steps are stored first, then C workers in
// one process take them (a lost claim race moves to the next task).
//
// usage: node lease_per_task.js --endpoints H:P [--tasks N] [--steps S]
//                               [--concurrency C] [--json]
'use strict';

const { Etcd3 } = require('etcd3');

function parseArgs(argv) {
  const o = { endpoints: '127.0.0.1:2379', tasks: 2000, steps: 4, concurrency: 16, json: false };
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--endpoints') o.endpoints = next();
    else if (a === '--tasks') o.tasks = Number(next());
    else if (a === '--steps') o.steps = Number(next());
    else if (a === '--concurrency') o.concurrency = Number(next());
    else if (a === '--json') o.json = true;
    else throw new Error(`unknown option ${a}`);
  }
  for (const k of ['tasks', 'steps', 'concurrency'])
    if (!Number.isInteger(o[k]) || o[k] < 1) throw new Error(`--${k} must be a positive integer`);
  return o;
}

async function runTask(client, prefix, id, steps, stats) {
  const lease = client.lease(10, { autoKeepAlive: false });
  const leaseId = await lease.grant();
  stats.calls++;
  const claim = prefix + 'claims/' + id;
  const won = await client
    .if(claim, 'Version', '==', 0)
    .then(client.put(claim).value(JSON.stringify({ runner: 'node', at: Date.now() })).lease(leaseId))
    .commit();
  stats.calls++;
  if (!won.succeeded) {
    await lease.revoke();
    stats.calls++;
    stats.lost++;
    return;
  }
  for (let k = 0; k < steps; k++) {
    // the step does nothing; its progress is a plain put
    await client.put(prefix + 'status/' + id).value(JSON.stringify({ next_step: k + 1 }));
    stats.calls++;
  }
  await client.put(prefix + 'done/' + id).value(JSON.stringify({ status: 'succeeded' }));
  await lease.revoke(); // the claim goes with it
  stats.calls += 2;
  stats.done++;
}

async function main() {
  const o = parseArgs(process.argv);
  const prefix = `/lease-per-task-${process.pid}-${Math.random().toString(16).slice(2, 10)}/`;
  const client = new Etcd3({ hosts: o.endpoints.split(',').map((h) => 'http://' + h) });
  try {
    const ids = [];
    for (let i = 0; i < o.tasks; i++) ids.push('t' + String(i).padStart(6, '0'));
    // Store the tasks first, as leaserun bench does.
    for (let i = 0; i < ids.length; i += 64)
      await Promise.all(ids.slice(i, i + 64).map((id) =>
        client.put(prefix + 'tasks/' + id).value(JSON.stringify({ id, steps: o.steps }))));
    const stats = { calls: 0, lost: 0, done: 0 };
    let next = 0;
    const cpu0 = process.cpuUsage();
    const t0 = process.hrtime.bigint();
    const worker = async () => {
      while (next < ids.length) {
        const id = ids[next++];
        await runTask(client, prefix, id, o.steps, stats);
      }
    };
    await Promise.all(Array.from({ length: o.concurrency }, worker));
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    const cpu = process.cpuUsage(cpu0);
    const out = {
      design: 'lease per task (etcd3 ' + require('etcd3/package.json').version + ')',
      tasks: o.tasks,
      steps: o.steps,
      concurrency: o.concurrency,
      run_s: Number(seconds.toFixed(3)),
      tasks_per_s: Number((stats.done / seconds).toFixed(1)),
      calls_per_task: Number((stats.calls / o.tasks).toFixed(3)),
      cpu_us_per_task: Number(((cpu.user + cpu.system) / o.tasks).toFixed(1)),
      claims_lost: stats.lost,
    };
    if (o.json) console.log(JSON.stringify(out));
    else for (const [k, v] of Object.entries(out)) console.log(`${k.padEnd(18)} ${v}`);
  } finally {
    await client.delete().prefix(prefix).catch(() => {});
    client.close();
  }
}

main().catch((e) => {
  console.error('lease_per_task: ' + (e && e.message ? e.message : e));
  process.exit(1);
});
