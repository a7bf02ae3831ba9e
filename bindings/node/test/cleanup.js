// cleanup.js - what a test started is stopped in reverse order when it ends
// (runners before clients, clients before etcd), whatever order node:test
// runs its own after-hooks in.
const stacks = new WeakMap();

/** Run fn when test t ends, before everything registered earlier. */
export function onEnd(t, fn) {
	let stack = stacks.get(t);
	if (stack === undefined) {
		stack = [];
		stacks.set(t, stack);
		t.after(async () => {
			while (stack.length > 0) await stack.pop()();
		});
	}
	stack.push(fn);
}
