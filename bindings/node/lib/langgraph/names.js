// names.js - where a LangGraph thread lives in leaserun: the names of its
// checkpoints and writes (shared values, P"shared/<name>") and the ids of
// its runs (tasks). Names allow only [A-Za-z0-9._:-]{1,200}, so a thread id
// or namespace that does not fit is encoded, and '.' separates the parts.
import { createHash } from 'node:crypto';

const VERBATIM = /^[A-Za-z0-9_-]{1,64}$/;
const ID_PART = /^[A-Za-z0-9_:-]{1,64}$/;
const NAME_MAX = 200;

function b64url(bytes) {
	return Buffer.from(bytes).toString('base64url');
}

function hash(text, chars) {
	return b64url(createHash('sha256').update(text, 'utf8').digest()).slice(0, chars);
}

/** The thread's part of every name: the id itself when it is short and
 * plain, else ":" + its UTF-8 in base64url, else "::" + a hash of it. */
export function threadKey(threadId) {
	if (typeof threadId !== 'string' || threadId === '')
		throw new TypeError('thread_id: expected a non-empty string');
	if (VERBATIM.test(threadId)) return threadId;
	const bytes = Buffer.from(threadId, 'utf8');
	if (bytes.length <= 45) return `:${b64url(bytes)}`;
	return `::${hash(threadId, 43)}`;
}

/** The namespace's part: "_" for the root graph, a hash for subgraphs (their
 * namespaces are long); the real one is stored in each value. */
export function nsKey(ns) {
	return ns === '' ? '_' : hash(ns, 22);
}

function part(what, id) {
	if (typeof id !== 'string' || !ID_PART.test(id))
		throw new TypeError(`${what} "${id}": expected 1 to 64 of A-Z a-z 0-9 _ : -`);
	return id;
}

function checked(name) {
	if (name.length > NAME_MAX) throw new RangeError(`the name ${name} is over ${NAME_MAX} characters`);
	return name;
}

/** Every name of the thread starts with this. */
export function threadPrefix(threadId) {
	return `lg.${threadKey(threadId)}.`;
}

/** Every name of every thread starts with this. */
export const ALL_THREADS = 'lg.';

/** Names of the checkpoints of one namespace of a thread start with this. */
export function checkpointPrefix(threadId, ns) {
	return `${threadPrefix(threadId)}${nsKey(ns)}.c.`;
}

export function checkpointName(threadId, ns, checkpointId) {
	return checked(checkpointPrefix(threadId, ns) + part('checkpoint_id', checkpointId));
}

/** Names of the writes saved against one checkpoint start with this. */
export function writesPrefix(threadId, ns, checkpointId) {
	return `${threadPrefix(threadId)}${nsKey(ns)}.w.${part('checkpoint_id', checkpointId)}.`;
}

export function writeName(threadId, ns, checkpointId, taskId, idx) {
	return checked(`${writesPrefix(threadId, ns, checkpointId)}${part('task_id', taskId)}.${idx}`);
}

/** What a name under ALL_THREADS holds: a checkpoint or a write. */
export function nameKind(name) {
	const parts = name.split('.');
	return parts.length >= 5 ? parts[3] : '';
}

/** The run hint of a thread: the last run that started on it. Outside
 * threadPrefix, so that deleting a thread keeps its run numbering. */
export function runHintName(threadId) {
	return `lgrun.${threadKey(threadId)}`;
}

/** The lock every run of the thread holds exclusively (docs/locks.md):
 * "lg/" + threadKey, whose at most 61 characters of A-Z a-z 0-9 _ - :
 * always make a valid path segment. */
export function threadLock(threadId) {
	return `lg/${threadKey(threadId)}`;
}

/** The task id of run `seq` of the thread. */
export function runId(threadId, seq) {
	return checked(`lg.${threadKey(threadId)}.${seq}`);
}

const GRAPH_NAME = /^[A-Za-z0-9._:-]{1,64}$/;

/** The step that runs graph `graph`: a name of 1 to 64 of A-Z a-z 0-9 . _ :
 * - (it is part of a step name, and of the message a shell runner gives
 * for the step), else a TypeError. */
export function graphStep(graph) {
	if (typeof graph !== 'string' || !GRAPH_NAME.test(graph))
		throw new TypeError(`the graph name must be 1 to 64 of A-Z a-z 0-9 . _ : -, not ${
			typeof graph === 'string' ? JSON.stringify(graph) : typeof graph}`);
	return `langgraph:${graph}`;
}
