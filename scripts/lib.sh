# shellcheck shell=bash
# lib.sh - shell functions shared by the scripts in this folder.
#
# Source it from bash (the scripts run with set -euo pipefail). It defines
# LR_ROOT, the repository root, and functions prefixed lr_; it runs nothing.

LR_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Debian packages the build of the library and the command needs, with
# etcd: all the demo needs.
LR_BUILD_PACKAGES=(
	gcc pkg-config meson ninja-build
	libgrpc-dev libprotobuf-c-dev protobuf-c-compiler libjansson-dev
	# The HTTP server of /metrics and `leaserun web`.
	libmicrohttpd-dev
	etcd-server etcd-client
)
# Debian packages the build and the tests need (g++: the Node.js addon).
LR_PACKAGES=(
	"${LR_BUILD_PACKAGES[@]}"
	g++ openssl
	# The web tests: promtool checks /metrics (it ships in Debian's
	# prometheus package, which on a systemd host also starts a
	# Prometheus server on :9090: `systemctl disable --now prometheus`
	# if it is not wanted), and headless Chromium loads the page.
	prometheus chromium
)

lr_say() {
	printf '%s\n' "$*" >&2
}

lr_die() {
	lr_say "error: $*"
	exit 1
}

# lr_missing_packages [--build]: prints the packages of LR_PACKAGES (with
# --build, of LR_BUILD_PACKAGES) that are not installed, one a line, and
# without --build Debian's nodejs and npm when there is no node or npm
# command (a Node.js installed otherwise, with its own npm, is used as it
# is).
lr_missing_packages() {
	local pkg status wanted=("${LR_PACKAGES[@]}")
	[ "${1:-}" = --build ] && wanted=("${LR_BUILD_PACKAGES[@]}")
	for pkg in "${wanted[@]}"; do
		# No pipe into grep -q: under pipefail, grep leaving early
		# makes dpkg die of SIGPIPE, and the package look missing.
		status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null) || status=
		if [ "$status" != 'install ok installed' ]; then
			printf '%s\n' "$pkg"
		fi
	done
	[ "${1:-}" = --build ] && return 0
	command -v node >/dev/null 2>&1 || echo nodejs
	command -v npm >/dev/null 2>&1 || echo npm
}

# lr_check_without_dpkg [--build]: without dpkg, only check that the
# tools and libraries are there.
lr_check_without_dpkg() {
	local cmd missing=() wanted=(gcc pkg-config meson ninja protoc-c etcd etcdctl)
	[ "${1:-}" = --build ] || wanted+=(g++ openssl node npm promtool chromium)
	for cmd in "${wanted[@]}"; do
		command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
	done
	if command -v pkg-config >/dev/null 2>&1 &&
		! pkg-config --exists grpc gpr libprotobuf-c jansson libmicrohttpd; then
		missing+=("pkg-config modules grpc gpr libprotobuf-c jansson libmicrohttpd")
	fi
	if [ "${#missing[@]}" -gt 0 ]; then
		lr_say "missing: ${missing[*]}"
		lr_say "install the equivalents of these Debian packages: ${wanted[*]}"
		return 1
	fi
}

# The npm packages of DIR (default bindings/node: Node-API headers,
# LangGraph for the tests) as its committed package-lock.json pins them:
# `npm ci` when node_modules is missing or older than the lockfile; silent
# otherwise.
lr_npm_ci() {
	local dir=${1:-$LR_ROOT/bindings/node}
	[ -f "$dir/package-lock.json" ] || return 0
	if [ -f "$dir/node_modules/.package-lock.json" ] &&
		[ "$dir/node_modules/.package-lock.json" -nt "$dir/package-lock.json" ]; then
		return 0
	fi
	lr_say "installing the npm packages of ${dir#"$LR_ROOT"/} (npm ci)"
	(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2) || {
		lr_say "npm ci failed in $dir"
		return 1
	}
}

# Installs whatever of LR_PACKAGES is missing, then the npm packages of
# bindings/node; silent when nothing is missing. lr_bootstrap --build:
# only LR_BUILD_PACKAGES, no npm (the library, the command and etcd).
lr_bootstrap() {
	if [ "${1:-}" = --build ]; then
		lr_bootstrap_debian --build
		return
	fi
	lr_bootstrap_debian && lr_npm_ci
}

lr_bootstrap_debian() {
	local missing=() sudo=()
	if ! command -v dpkg >/dev/null 2>&1; then
		lr_check_without_dpkg "$@"
		return
	fi
	mapfile -t missing < <(lr_missing_packages "$@")
	[ "${#missing[@]}" -eq 0 ] && return 0

	if [ "$(id -u)" -ne 0 ]; then
		if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
			sudo=(sudo -n)
		else
			lr_say "missing packages: ${missing[*]}"
			lr_say "install them with:"
			lr_say "  sudo apt-get update && sudo apt-get install -y ${missing[*]}"
			return 1
		fi
	fi
	lr_say "installing: ${missing[*]}"
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
		apt-get update -q >&2 || return 1
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -q "${missing[@]}" >&2 || return 1

	mapfile -t missing < <(lr_missing_packages "$@")
	if [ "${#missing[@]}" -gt 0 ]; then
		lr_say "still missing after apt-get install: ${missing[*]}"
		return 1
	fi
}

# lr_build DIR [meson setup options...]: configure DIR (reconfigure when it
# is already a build directory) and compile.
lr_build() {
	local dir=$1
	shift
	local reconfigure=()
	[ -f "$LR_ROOT/$dir/meson-private/coredata.dat" ] && reconfigure=(--reconfigure)
	meson setup "${reconfigure[@]}" "$LR_ROOT/$dir" "$LR_ROOT" "$@" || return 1
	meson compile -C "$LR_ROOT/$dir" || return 1
}

# Prints the pids of live etcd processes whose data directory lies under
# ROOT, one a line. Reads /proc, so it needs no procps.
lr_etcd_under() {
	local root=$1 proc pid comm state args
	for proc in /proc/[0-9]*; do
		pid=${proc#/proc/}
		comm=$(cat "$proc/comm" 2>/dev/null) || continue
		[ "$comm" = etcd ] || continue
		# Field 3 of stat, after the parenthesised name: Z is a zombie,
		# already dead.
		state=$(sed 's/^.*) \(.\).*$/\1/' "$proc/stat" 2>/dev/null) || continue
		[ "$state" = Z ] && continue
		args=$(tr '\0' ' ' <"$proc/cmdline" 2>/dev/null) || continue
		case $args in
		*"--data-dir=$root/"*) printf '%s\n' "$pid" ;;
		esac
	done
}

# lr_count_results TESTLOG: prints "PASSED FAILED SKIPPED" from the
# testlog.json of `meson test` (one JSON object per line).
lr_count_results() {
	local log=$1 passed=0 failed=0 skipped=0 result
	if [ -f "$log" ]; then
		while read -r result; do
			case $result in
			OK | EXPECTEDFAIL) passed=$((passed + 1)) ;;
			SKIP) skipped=$((skipped + 1)) ;;
			*) failed=$((failed + 1)) ;;
			esac
		done < <(grep -o '"result": "[A-Z]*"' "$log" |
			sed 's/^"result": "\([A-Z]*\)"$/\1/')
	fi
	printf '%s %s %s\n' "$passed" "$failed" "$skipped"
}

# Prints a free TCP port on 127.0.0.1, outside the kernel's range for
# outgoing connections: a member's peers reconnecting to it while it is down
# could otherwise take its port as their own source port (a TCP
# self-connect) and keep it from starting again.
lr_free_port() {
	local port lo=32768 hi=60999 from=20000 to=60000
	read -r lo hi < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
	if [ "$lo" -gt 12000 ]; then
		from=10000 to=$((lo - 1))
	elif [ "$hi" -lt 63000 ]; then
		from=$((hi + 1)) to=65000
	fi
	for port in $(shuf -i "$from-$to" -n 50); do
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return 0
		fi
	done
	lr_die "no free port found on 127.0.0.1"
}

# lr_etcd_start DIR NAME CLIENT_PORT PEER_PORT INITIAL_CLUSTER [STATE]
# Starts one etcd member in the background with its data and log under DIR;
# prints its pid. Settings match the tests: leases of 2 s are possible.
lr_etcd_start() {
	local dir=$1 name=$2 cport=$3 pport=$4 initial=$5 state=${6:-new}
	mkdir -p "$dir"
	etcd --name "$name" --data-dir "$dir/data" \
		--listen-client-urls "http://127.0.0.1:$cport" \
		--advertise-client-urls "http://127.0.0.1:$cport" \
		--listen-peer-urls "http://127.0.0.1:$pport" \
		--initial-advertise-peer-urls "http://127.0.0.1:$pport" \
		--initial-cluster "$initial" --initial-cluster-state "$state" \
		--initial-cluster-token leaserun-local \
		--heartbeat-interval 100 --election-timeout 1000 \
		--logger zap --log-outputs stderr --log-level error \
		>"$dir/etcd.log" 2>&1 &
	echo $!
}

# lr_etcd_private DIR NAME: one etcd member of its own on free loopback
# ports, its data and log under DIR. Sets LR_ETCD_PID (the caller stops it)
# and exports LEASERUN_ENDPOINTS; dies, stopping it, when it does not answer
# within 20 s.
lr_etcd_private() {
	local dir=$1 name=$2 ports
	mapfile -t ports < <(lr_free_ports 2)
	LR_ETCD_PID=$(lr_etcd_start "$dir" "$name" "${ports[0]}" "${ports[1]}" \
		"$name=http://127.0.0.1:${ports[1]}")
	export LEASERUN_ENDPOINTS=127.0.0.1:${ports[0]}
	if ! lr_etcd_wait "$LEASERUN_ENDPOINTS" 20; then
		kill -KILL "$LR_ETCD_PID" 2>/dev/null || true
		lr_die "etcd did not start (see $dir/etcd.log)"
	fi
}

# lr_etcd_wait ENDPOINTS SECONDS: until every endpoint answers health.
lr_etcd_wait() {
	local endpoints=$1 deadline=$((SECONDS + $2))
	until ETCDCTL_API=3 etcdctl --endpoints "$endpoints" --dial-timeout 1s \
		endpoint health >/dev/null 2>&1; do
		[ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.2
	done
}

# lr_free_ports N: prints N distinct free TCP ports on 127.0.0.1, one a line.
lr_free_ports() {
	local n=$1 port ports=() tries=0
	while [ "${#ports[@]}" -lt "$n" ]; do
		tries=$((tries + 1))
		[ "$tries" -le $((n * 20)) ] || lr_die "no $n free ports found on 127.0.0.1"
		port=$(lr_free_port)
		case " ${ports[*]} " in *" $port "*) continue ;; esac
		ports+=("$port")
	done
	printf '%s\n' "${ports[@]}"
}

# lr_etcd_running PID DATA_DIR: true when PID is a live etcd (not a zombie)
# whose data directory is DATA_DIR, however --data-dir was written. Guards
# against signalling a pid that was recycled for another process.
lr_etcd_running() {
	local pid=$1 data=$2 state args
	[ -n "$pid" ] && [ -r "/proc/$pid/comm" ] || return 1
	[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = etcd ] || return 1
	state=$(sed 's/^.*) \(.\).*$/\1/' "/proc/$pid/stat" 2>/dev/null) || return 1
	[ "$state" != Z ] || return 1
	args=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
	case "$args " in
	*"--data-dir $data "* | *"--data-dir=$data "*) return 0 ;;
	esac
	return 1
}

# lr_etcd_role ENDPOINT: prints "leader" or "follower" for a member that
# answers, and fails for one that does not.
lr_etcd_role() {
	local line
	line=$(ETCDCTL_API=3 etcdctl --endpoints "$1" --dial-timeout 1s \
		--command-timeout 2s endpoint status -w simple 2>/dev/null) || return 1
	# endpoint, id, version, db size, is leader, is learner, term, ...
	case $(awk -F', ' '{ print $5 }' <<<"$line") in
	true) echo leader ;;
	false) echo follower ;;
	*) return 1 ;;
	esac
}
