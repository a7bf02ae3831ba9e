#!/usr/bin/env node
// table.js - the table of scripts/bench-side-by-side from its JSON lines:
// medians per design and concurrency, and the ratios.
//
// usage: node table.js RESULTS.jsonl
'use strict';

const fs = require('fs');

const rows = fs.readFileSync(process.argv[2], 'utf8').split('\n').filter(Boolean)
  .map((l) => JSON.parse(l));

function median(xs) {
  const s = xs.filter((x) => typeof x === 'number').sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function med(design, c, field, extra = () => true) {
  return median(rows.filter((r) => r.design === design && r.concurrency === c && extra(r))
    .map((r) => r[field]));
}

const fmt = (v, d = 0) => (Number.isFinite(v) ? v.toFixed(d) : '-');
const pad = (cells, widths) => cells.map((c, i) => String(c).padStart(widths[i])).join('  ');

const concs = [...new Set(rows.map((r) => r.concurrency))].sort((a, b) => a - b);
const w = [11, 15, 14, 6, 13, 17, 13, 13];
// A row of a leaserun design beside the lease-per-task design.
function row(design, c, withLptCpu) {
  const v = med(design, c, 'tasks_per_s');
  const lpt = med('lease-per-task', c, 'tasks_per_s');
  return [c, fmt(v), fmt(lpt), fmt(v / lpt, 1) + 'x', fmt(med(design, c, 'txns_per_task'), 2),
    fmt(med(design, c, 'cpu_us_per_task')),
    withLptCpu ? fmt(med('lease-per-task', c, 'cpu_us_per_task')) : '',
    fmt(med(design, c, 'commit_p99_ms'), 1) + ' ms'];
}
console.log(pad(['concurrency', 'leaserun tasks/s', 'lease-per-task', 'ratio',
  'txns per task', 'CPU us/task (lr)', 'CPU us (lpt)', 'commit p99'], w));
for (const c of concs) console.log(pad(row('leaserun', c, true), w));
if (rows.some((r) => r.design === 'threads')) {
  console.log('');
  console.log('leaserun above: its workers as fibers on one thread (--threads 1); here a thread per worker');
  console.log(pad(['concurrency', 'tasks/s', 'lease-per-task', 'ratio', 'txns per task',
    'CPU us/task', '', 'commit p99'], w));
  for (const c of concs) console.log(pad(row('threads', c, false), w));
}
if (rows.some((r) => r.design === 'before')) {
  console.log('');
  console.log(pad(['concurrency', 'before tasks/s', 'now tasks/s', 'ratio', 'txns per task',
    'CPU us/task', '(before)', 'commit p99'], w));
  for (const c of concs) {
    const b = med('before', c, 'tasks_per_s');
    const lr = med('leaserun', c, 'tasks_per_s');
    // A leaserun before group commit reported no txns: one per write.
    const bt = med('before', c, 'txns_per_task');
    const btxns = Number.isFinite(bt) ? bt : med('before', c, 'writes_per_task');
    console.log(pad([c, fmt(b), fmt(lr), fmt(lr / b, 1) + 'x',
      `${fmt(btxns, 2)} -> ${fmt(med('leaserun', c, 'txns_per_task'), 2)}`,
      fmt(med('leaserun', c, 'cpu_us_per_task')), fmt(med('before', c, 'cpu_us_per_task')),
      `${fmt(med('before', c, 'commit_p99_ms'), 1)} -> ${fmt(med('leaserun', c, 'commit_p99_ms'), 1)} ms`], w));
  }
}
console.log('');
const w2 = [11, 22, 20, 22, 22];
console.log(pad(['concurrency', 'client CPU us/call:', 'min_client Put', 'min_client txn',
  'leaserun raw txn'], w2));
for (const c of concs) {
  const put = med('min_client', c, 'cpu_us_per_call', (r) => r.call === 'put');
  const txn = med('min_client', c, 'cpu_us_per_call', (r) => r.call === 'txn');
  const raw = med('leaserun', c, 'raw_cpu_us_per_txn');
  console.log(pad([c, '', fmt(put, 1), fmt(txn, 1),
    `${fmt(raw, 1)} (${fmt(raw / put, 1)}x Put)`], w2));
}
