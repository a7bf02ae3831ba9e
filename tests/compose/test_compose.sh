#!/usr/bin/env bash
# test_compose.sh [ROOT] - checks docker-compose.yml, Dockerfile and
# .dockerignore under ROOT (default: this repository) without Docker: the
# services, pinned images, a consistent etcd cluster definition, runner
# endpoints matching the members, health checks, and a two-stage image that
# runs as an unprivileged user.
#
# The YAML is read with grep, sed and awk, for the layout of this file:
# two-space indentation, services as "  name:" under "services:", etcd flags
# as "--flag=value" list items, environment as "KEY: value".
set -euo pipefail

ROOT=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
COMPOSE=$ROOT/docker-compose.yml
DOCKERFILE=$ROOT/Dockerfile
IGNORE=$ROOT/.dockerignore
MEMBERS=(etcd1 etcd2 etcd3)

passed=0 failed=0
ok() {
	passed=$((passed + 1))
	printf 'ok - %s\n' "$1"
}
not_ok() {
	failed=$((failed + 1))
	printf 'not ok - %s\n' "$1"
}
# check DESCRIPTION COMMAND...: ok when the command succeeds.
check() {
	local what=$1
	shift
	if "$@"; then ok "$what"; else not_ok "$what"; fi
}

# ---- reading the compose file ----------------------------------------------

# The names of the services, one a line.
services() {
	awk '
		/^[^ #]/ { in_services = ($0 ~ /^services:[[:space:]]*$/); next }
		in_services && /^  [A-Za-z0-9._-]+:[[:space:]]*$/ {
			name = $0; sub(/^  /, "", name); sub(/:.*$/, "", name); print name
		}' "$COMPOSE"
}

# The lines of service NAME's block, comments dropped.
service_block() {
	awk -v name="$1" '
		/^[^ #]/ { in_services = ($0 ~ /^services:[[:space:]]*$/); inside = 0; next }
		in_services && /^  [^ #]/ { inside = ($0 == "  " name ":"); next }
		inside && !/^[[:space:]]*#/ { print }' "$COMPOSE"
}

# flag NAME FLAG: the value of --FLAG=value in NAME's block ("" if none).
flag() {
	service_block "$1" | sed -n "s/^.*--$2=\([^\"' ,]*\(,[^\"' ,]*\)*\).*$/\1/p" | head -n 1
}

# env NAME KEY: the value of KEY in NAME's environment ("KEY: v" or "KEY=v").
env_of() {
	service_block "$1" |
		sed -n "s/^[[:space:]-]*$2[:=][[:space:]]*[\"']\{0,1\}\([^\"']*\)[\"']\{0,1\}[[:space:]]*$/\1/p" |
		head -n 1
}

# key_value NAME KEY: the scalar value of "    KEY: value" in NAME's block.
key_value() {
	service_block "$1" |
		sed -n "s/^    $2:[[:space:]]*[\"']\{0,1\}\([^\"']*\)[\"']\{0,1\}[[:space:]]*$/\1/p" |
		head -n 1
}

# sorted_list "a,b,c": the items one a line, sorted.
sorted_list() {
	tr ',' '\n' <<<"$1" | sed '/^$/d' | sort
}

# (Here-strings, not pipes: under pipefail, grep -q leaving early can fail
# the writer with SIGPIPE and so the whole check.)
has_service() {
	grep -qx -- "$1" <<<"$(services)"
}

# lacks_key SERVICE KEY: SERVICE's block has no KEY.
lacks_key() {
	! grep -q "^    $2:" <<<"$(service_block "$1")"
}

# mentions_all TEXT WORD...: every word appears in TEXT.
mentions_all() {
	local text=$1 word
	shift
	for word in "$@"; do
		grep -q -- "$word" <<<"$text" || return 1
	done
}

# mentions_none TEXT REGEX: REGEX matches no line of TEXT.
mentions_none() {
	! grep -q -- "$2" <<<"$1"
}

# non_root USER[:GROUP]
non_root() {
	case ${1%%:*} in
	"" | root | 0) return 1 ;;
	esac
}

has_healthcheck() {
	service_block "$1" | awk '
		/^    [^ ]/ { in_hc = ($0 ~ /^    healthcheck:[[:space:]]*$/); next }
		in_hc && /^      test:.*etcdctl.*endpoint.*health/ { found = 1 }
		END { exit !found }'
}

# waits_healthy SERVICE MEMBER: SERVICE depends on MEMBER being healthy.
waits_healthy() {
	service_block "$1" | awk -v m="$2" '
		/^    [^ ]/ { in_dep = ($0 ~ /^    depends_on:[[:space:]]*$/); cur = ""; next }
		in_dep && /^      [^ ]/ { cur = $1; sub(/:$/, "", cur); next }
		in_dep && cur == m && /^        condition:[[:space:]]*service_healthy[[:space:]]*$/ { found = 1 }
		END { exit !found }'
}

# ---- checks: compose ---------------------------------------------------------

check "docker-compose.yml exists" test -f "$COMPOSE"
[ -f "$COMPOSE" ] || {
	printf '%s passed, %s failed\n' "$passed" "$failed"
	exit 1
}

for s in "${MEMBERS[@]}" runner submit; do
	check "service $s exists" has_service "$s"
done

# Every image has a digest, or an explicit tag that is not "latest".
image_pinned() {
	local last=${1##*/} # repository[:tag], after any registry and path
	[[ $1 == *@sha256:* ]] && return 0
	[[ $last == *:* && ${last##*:} != latest ]]
}
while read -r image; do
	check "image $image is pinned (tag, not latest)" image_pinned "$image"
done < <(sed -n 's/^[[:space:]]*image:[[:space:]]*["'\'']\{0,1\}\([^"'\'' ]*\).*$/\1/p' "$COMPOSE" | sort -u)

etcd_image_is_v34() {
	[[ $(key_value "$1" image) =~ ^(quay\.io/coreos|gcr\.io/etcd-development)/etcd:v3\.4\.[0-9]+$ ]]
}

expected_cluster=
for m in "${MEMBERS[@]}"; do
	expected_cluster+="${expected_cluster:+,}$m=http://$m:2380"
done

client_endpoints=()
for m in "${MEMBERS[@]}"; do
	check "$m runs the official etcd image at a v3.4 tag" etcd_image_is_v34 "$m"
	check "$m is named $m" test "$(flag "$m" name)" = "$m"
	peer=$(flag "$m" initial-advertise-peer-urls)
	check "$m advertises its peer URL http://$m:2380" test "$peer" = "http://$m:2380"
	check "$m's --initial-cluster lists the three members by name and peer URL" \
		test "$(flag "$m" initial-cluster)" = "$expected_cluster"
	check "$m's --initial-cluster has itself as $m=$peer" \
		grep -q "\(^\|,\)$m=$peer\(,\|$\)" <<<"$(flag "$m" initial-cluster)"
	check "$m listens for peers and clients" \
		test -n "$(flag "$m" listen-peer-urls)" -a -n "$(flag "$m" listen-client-urls)"
	check "$m starts a new cluster with a token" \
		test "$(flag "$m" initial-cluster-state)" = new -a -n "$(flag "$m" initial-cluster-token)"
	check "$m keeps its data in a volume" \
		grep -q "^[[:space:]]*- *[A-Za-z0-9_.-]*:$(dirname "$(flag "$m" data-dir)")" <<<"$(service_block "$m")"
	check "$m has a health check running etcdctl endpoint health" \
		has_healthcheck "$m"
	client=$(flag "$m" advertise-client-urls)
	client_endpoints+=("${client#http://}")
done

tokens=$(for m in "${MEMBERS[@]}"; do flag "$m" initial-cluster-token; done | sort -u | wc -l)
check "the three members share one cluster token" test "$tokens" -eq 1

members_list=$(
	IFS=,
	echo "${client_endpoints[*]}"
)
for s in runner submit; do
	endpoints=$(env_of "$s" LEASERUN_ENDPOINTS)
	check "$s's LEASERUN_ENDPOINTS ($endpoints) lists the members' client URLs" \
		test "$(sorted_list "$endpoints")" = "$(sorted_list "$members_list")"
	for m in "${MEMBERS[@]}"; do
		check "$s waits for $m to be healthy" waits_healthy "$s" "$m"
	done
done

built_from_dockerfile() {
	local block
	block=$(service_block "$1")
	grep -Eq '^    build:[[:space:]]*\.?[[:space:]]*$' <<<"$block" || return 1
	grep -Eq '^    build:[[:space:]]*\.[[:space:]]*$' <<<"$block" && return 0
	grep -Eq '^      context:[[:space:]]*\.[[:space:]]*$' <<<"$block" &&
		grep -Eq '^      dockerfile:[[:space:]]*(\./)?Dockerfile[[:space:]]*$' <<<"$block"
}
check "runner is built from ./Dockerfile" built_from_dockerfile runner
check "runner's command is worker" grep -Eq '^    command:.*worker' <<<"$(service_block runner)"
check "runner has no container_name (it scales)" lacks_key runner container_name
check "runner publishes no fixed host port (it scales)" lacks_key runner ports
check "submit submits the specs of examples/tasks" \
	grep -q 'leaserun submit' <<<"$(service_block submit)"
check "submit mounts examples/tasks" \
	grep -Eq '^ +- +\./examples/tasks:' <<<"$(service_block submit)"
check "submit runs once (restart: \"no\")" test "$(key_value submit restart)" = no
spec_count=$(find "$ROOT/examples/tasks" -name '*.json' 2>/dev/null | wc -l)
check "examples/tasks holds example specs ($spec_count)" test "$spec_count" -ge 1
for spec in "$ROOT"/examples/tasks/*.json; do
	[ -f "$spec" ] || continue
	check "examples/tasks/$(basename "$spec") has an id and steps" \
		mentions_all "$(cat "$spec")" '"id"' '"steps"' '"run"'
done

# ---- checks: Dockerfile ------------------------------------------------------

check "Dockerfile exists" test -f "$DOCKERFILE"
stages=$(grep -Eci '^FROM[[:space:]]' "$DOCKERFILE" || true)
check "Dockerfile has two stages ($stages)" test "$stages" -eq 2
check "the build stage is Debian bookworm, named" \
	grep -Eiq '^FROM[[:space:]]+debian:bookworm[^[:space:]]*[[:space:]]+AS[[:space:]]+[a-z]+' "$DOCKERFILE"
check "the build stage installs the -dev packages, meson and ninja" \
	mentions_all "$(cat "$DOCKERFILE")" libgrpc-dev libprotobuf-c-dev protobuf-c-compiler \
	libjansson-dev libmicrohttpd-dev meson ninja-build
check "the build stage builds with meson" grep -Eq 'meson setup' "$DOCKERFILE"

# The last stage: from its FROM to the end.
runtime=$(awk 'toupper($1) == "FROM" { block = "" } { block = block $0 "\n" } END { printf "%s", block }' "$DOCKERFILE")
check "the runtime stage is Debian bookworm" grep -Eiq '^FROM[[:space:]]+debian:bookworm' <<<"$runtime"
check "the runtime stage installs the runtime libraries" \
	mentions_all "$runtime" libgrpc29 libprotobuf-c1 libjansson4 libmicrohttpd12
check "the runtime stage installs no -dev package" mentions_none "$runtime" '[a-z0-9]-dev\b'
check "the runtime stage copies leaserun from the build stage" \
	grep -Eiq '^COPY[[:space:]]+--from=' <<<"$runtime"
user=$(sed -n 's/^USER[[:space:]]\{1,\}\([^[:space:]]*\).*$/\1/Ip' <<<"$runtime" | tail -n 1)
check "the runtime stage runs as a non-root USER ($user)" non_root "$user"
check "the entrypoint is leaserun" grep -Eq '^ENTRYPOINT.*leaserun' <<<"$runtime"

# ---- checks: .dockerignore ---------------------------------------------------

check ".dockerignore exists" test -f "$IGNORE"
check ".dockerignore leaves out .git" grep -qx '\.git/\{0,1\}' "$IGNORE"
check ".dockerignore leaves out the build directories" grep -Eqx '/?build\*/?' "$IGNORE"

printf '%s passed, %s failed\n' "$passed" "$failed"
[ "$failed" -eq 0 ]
