// slots.js - the run slots of a thread (run k is the task lg.<thread>.<k>):
// which run is pending or running, else which slot the next run takes.
// Read by submitRun and by the saver's deleteThread. Event loop only.
import { runHintName, runId } from './names.js';

const ACTIVE = new Set(['pending', 'running']);

// What promise resolves to, or null when it fails with error code `code`.
export async function nullOn(code, promise) {
	try {
		return await promise;
	} catch (err) {
		if (err.code === code) return null;
		throw err;
	}
}

/** A task's status, or null when there is no such task (any other error,
 * etcd unreachable for one, rejects). */
export function statusOrNull(client, id) {
	return nullOn('LR_ENOTFOUND', client.status(id));
}

/**
 * Walk the thread's run slots from the one its hint names (the run that
 * started last) to the first that is pending or running, or else the first
 * free one. Resolves to {seq, status}: the status of run seq, pending or
 * running, or null when seq is the slot of the next run.
 *
 * A finished run is passed; so is a hole a purged run left when the run
 * after it exists still; and so is the run the hint names once it was
 * purged: it started, its checkpoints and hint outlive it, and its id is
 * never given to a new run.
 */
export async function runSlot(client, threadId) {
	const hint = await client.shared.get(runHintName(threadId));
	for (let seq = Math.max(hint?.seq ?? 1, 1); ; seq += 1) {
		const status = await statusOrNull(client, runId(threadId, seq));
		if (status !== null && ACTIVE.has(status.state)) return { seq, status };
		if (status !== null || seq === hint?.seq) continue;
		if ((await statusOrNull(client, runId(threadId, seq + 1))) === null) return { seq, status: null };
	}
}
