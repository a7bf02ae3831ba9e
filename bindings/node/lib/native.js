// native.js - finds and loads leaserun.node, the addon built with the rest
// of the project by meson (bindings/node/meson.build).
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { LeaseRunError } from './errors.js';

const here = dirname(fileURLToPath(import.meta.url));

// LEASERUN_NODE_ADDON names the file; otherwise the build directory
// `build` of the repository this package sits in.
function addonPath() {
	const candidates = [
		process.env.LEASERUN_NODE_ADDON,
		join(here, '..', '..', '..', 'build', 'bindings', 'node', 'leaserun.node'),
	].filter(Boolean);
	const found = candidates.find((p) => existsSync(p));
	if (found === undefined) {
		throw new Error(
			`leaserun: the native addon is not built (looked for ${candidates.join(', ')}). ` +
				'Build it from the repository root: scripts/bootstrap && meson setup build && ' +
				'meson compile -C build, or set LEASERUN_NODE_ADDON to its path.',
		);
	}
	return found;
}

const native = createRequire(import.meta.url)(addonPath());
native.setErrorClass(LeaseRunError);

export default native;
