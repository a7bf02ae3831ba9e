#!/usr/bin/env bash
# Installs leaserun into a temporary root and builds a program against it
# with nothing but `pkg-config --cflags --libs leaserun`.
set -euo pipefail
build=$1
root=$(mktemp -d "${TMPDIR:-/tmp}/leaserun-install-XXXXXX")
trap 'rm -rf "$root"' EXIT

meson install -C "$build" --no-rebuild --destdir "$root" >"$root/install.log" 2>&1 ||
	{ cat "$root/install.log"; exit 1; }
pc=$(find "$root" -name leaserun.pc | head -n 1)
[ -n "$pc" ] || { echo "leaserun.pc was not installed"; exit 1; }

cat >"$root/prog.c" <<'C'
#include <stdio.h>
#include <leaserun.h>

int main(void)
{
	lr_client_opts o = { .endpoints = "not an endpoint" };
	lr_client *c = NULL;
	lr_err err;
	int rc = lr_client_open(&o, &c, &err);
	printf("%s: %s\n", lr_strerror(rc), err.msg);
	return rc == LR_EINVAL ? 0 : 1;
}
C
export PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_SYSROOT_DIR=$root
flags=$(pkg-config --cflags --libs leaserun)
echo "pkg-config --cflags --libs leaserun: $flags"
libdir=$(pkg-config --libs-only-L leaserun | sed 's/^ *-L//; s/ *$//')
# A library built with sanitizers needs a program built with them too.
# (Read whole first: `ldd | grep -q` under pipefail fails at random when
# grep stops reading before ldd is done writing.)
sanitize=()
deps=$(ldd "$libdir/libleaserun.so")
if [[ $deps == *libasan* ]]; then
	sanitize=(-fsanitize=address,undefined)
fi
# shellcheck disable=SC2086
cc "${sanitize[@]}" -o "$root/prog" "$root/prog.c" $flags
LD_LIBRARY_PATH=$libdir "$root/prog"
