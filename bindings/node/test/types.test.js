// types.test.js - the TypeScript declarations compile against the real
// LangGraph and Node.js types, and refuse misuse (test/types/check.ts).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
const project = fileURLToPath(new URL('./types/tsconfig.json', import.meta.url));

test('the type declarations compile and refuse misuse', async () => {
	const out = await new Promise((resolve) =>
		execFile(process.execPath, [tsc, '-p', project], (err, stdout, stderr) =>
			resolve({ code: err ? err.code : 0, text: stdout + stderr }),
		),
	);
	assert.equal(out.code, 0, out.text);
});
