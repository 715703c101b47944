#!/usr/bin/env bash
# vmem mcp against real MCP clients: the MCP TypeScript SDK's stdio client
# (client.mjs) and the MCP Inspector's CLI mode, both at the exact versions
# of package-lock.json, on a temporary git repository with its own daemon.
# Prints TAP ("ok N - ..." / "not ok N - ...", then "1..N"); exits non-zero
# when a case failed or the clients could not be installed.
#
# usage: tests/mcp/run.sh [VMEM [VMEMD]]   (default: $VMEM, $VMEMD, PATH)
# Needs node (>= 18) and npm. The packages are installed with `npm ci`
# outside the source tree, in $VMEM_MCP_NODE_DIR, default
# ${XDG_CACHE_HOME:-~/.cache}/vmem/mcp-node-<lockfile hash>, and reused
# while package-lock.json does not change.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
VMEM=${1:-${VMEM:-vmem}}
VMEMD=${2:-${VMEMD:-vmemd}}
VMEM=$(command -v "$VMEM" || echo "$VMEM")
VMEMD=$(command -v "$VMEMD" || echo "$VMEMD")
case $VMEM in /*) ;; *) VMEM=$PWD/$VMEM ;; esac
case $VMEMD in /*) ;; *) VMEMD=$PWD/$VMEMD ;; esac
export VMEMD
# Only what this script sets reaches vmem: no stray socket or repository.
unset VMEM_SOCKET VMEM_REPO VMEM_AGENT_ID VMEM_NO_AUTOSTART
export npm_config_loglevel=error npm_config_update_notifier=false \
	npm_config_audit=false npm_config_fund=false

n=0
failed=0
ok() { # ok STATUS NAME [DETAIL...]
	local status=$1 name=$2
	shift 2
	n=$((n + 1))
	if [ "$status" -eq 0 ]; then
		echo "ok $n - $name"
	else
		failed=$((failed + 1))
		echo "not ok $n - $name"
		[ $# -gt 0 ] && printf '%s\n' "$@" | sed 's/^/# /'
	fi
}
finish() {
	echo "1..$n"
	[ "$failed" -eq 0 ] && [ "$n" -gt 0 ]
	exit $?
}

for tool in node npm git; do
	if ! command -v $tool >/dev/null; then
		ok 1 "$tool is installed (Debian: apt-get install nodejs npm)"
		finish
	fi
done
if [ ! -x "$VMEM" ] || [ ! -x "$VMEMD" ]; then
	ok 1 "vmem and vmemd are built" "VMEM=$VMEM VMEMD=$VMEMD"
	finish
fi

# --- the clients, at the locked versions -----------------------------------
hash=$(sha256sum "$here/package-lock.json" | cut -c1-12)
node_dir=${VMEM_MCP_NODE_DIR:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/vmem/mcp-node-$hash}
if [ ! -e "$node_dir/.installed" ]; then
	mkdir -p "$(dirname "$node_dir")"
	tmp=$(mktemp -d "$node_dir.XXXXXX")
	cp "$here/package.json" "$here/package-lock.json" "$tmp/"
	t=$SECONDS
	if (cd "$tmp" && npm ci --no-audit --no-fund) >"$tmp.log" 2>&1; then
		touch "$tmp/.installed"
		# Another run may have finished first: keep either.
		mv -T "$tmp" "$node_dir" 2>/dev/null || rm -rf "$tmp"
		echo "# npm ci took $((SECONDS - t)) s"
		rm -f "$tmp.log"
	else
		ok 1 "npm ci of tests/mcp/package-lock.json" "$(tail -20 "$tmp.log")"
		rm -rf "$tmp" "$tmp.log"
		finish
	fi
fi
# ESM resolves packages from the script's own directory.
cp "$here/client.mjs" "$node_dir/client.mjs"

# --- a repository and its daemon ------------------------------------------
work=$(mktemp -d /tmp/vmem-mcp-XXXXXX)
chmod 700 "$work"
repo=$work/repo
sock=$work/vmemd.sock
cleanup() {
	"$VMEM" --socket "$sock" --repo "$repo" --no-autostart daemon stop \
		>/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT
git init -q "$repo"
if ! out=$("$VMEM" --socket "$sock" --repo "$repo" daemon start 2>&1); then
	ok 1 "vmemd starts" "$out"
	finish
fi

# --- the SDK's client -----------------------------------------------------
# Its TAP lines, renumbered into ours; its plan line says it ran through.
planned=false
while IFS= read -r line; do
	case $line in
	"ok "*) ok 0 "sdk: ${line#ok * - }" ;;
	"not ok "*) ok 1 "sdk: ${line#not ok * - }" ;;
	1..*) planned=true ;;
	"#"*) echo "$line" ;;
	*) echo "# $line" ;;
	esac
done < <(cd "$node_dir" &&
	timeout 120 node client.mjs "$VMEM" "$repo" "$sock" 2>&1)
$planned
ok $? "sdk: client.mjs ran to its end"

# --- the Inspector's CLI mode ---------------------------------------------
inspect() { # inspect ARGS...: the inspector's stdout; its status
	(cd "$node_dir" && timeout 60 npx --no-install \
		@modelcontextprotocol/inspector --cli \
		"$VMEM" mcp --repo "$repo" --socket "$sock" "$@" 2>"$work/err")
}
# check_json JSON JS-EXPRESSION-OF-r: status 0 when it is true
check_json() {
	node -e 'const r = JSON.parse(process.argv[1]);
		process.exit(eval(process.argv[2]) ? 0 : 1)' "$1" "$2" \
		2>/dev/null
}

out=$(inspect --method tools/list)
st=$?
check_json "$out" 'r.tools.length === 8 && r.tools.map((t) => t.name)
	.join() === "store_decision,get_decision,query_decisions," +
	"decisions_before,search_decisions,decision_history,delete_decision," +
	"sync_memory" && r.tools.every((t) => t.inputSchema.type === "object")'
ok $((st | $?)) "inspector: tools/list lists the eight tools" \
	"status $st" "$out" "$(cat "$work/err")"

out=$(inspect --method tools/call --tool-name store_decision \
	--tool-arg x=42 --tool-arg y=3 --tool-arg z=2 \
	--tool-arg 'content=Use a = sign, spaces and "quotes"')
st=$?
check_json "$out" 'const d = JSON.parse(r.content[0].text);
	!r.isError && d.content === "Use a = sign, spaces and \"quotes\"" &&
	d.coordinate.x === 42 && d.version === 1'
ok $((st | $?)) "inspector: tools/call store_decision" \
	"status $st" "$out" "$(cat "$work/err")"

out=$(inspect --method tools/call --tool-name get_decision \
	--tool-arg x=42 --tool-arg y=3 --tool-arg z=2)
st=$?
check_json "$out" 'const d = JSON.parse(r.content[0].text);
	!r.isError && d.content === "Use a = sign, spaces and \"quotes\""'
ok $((st | $?)) "inspector: tools/call get_decision returns it" \
	"status $st" "$out" "$(cat "$work/err")"

out=$(inspect --method tools/call --tool-name get_decision \
	--tool-arg x=0 --tool-arg y=3 --tool-arg z=2)
st=$?
check_json "$out" 'r.isError === true &&
	/^CoordinateValidationError/.test(r.content[0].text)'
ok $((st | $?)) "inspector: an invalid coordinate is a tool error" \
	"status $st" "$out" "$(cat "$work/err")"

# The CLI agrees with what the inspector stored.
out=$("$VMEM" --socket "$sock" --repo "$repo" --json get 42 3 2 2>&1)
check_json "$out" 'r.content === "Use a = sign, spaces and \"quotes\""'
ok $? "vmem get sees the inspector's store" "$out"

finish
