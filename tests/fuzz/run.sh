#!/usr/bin/env bash
# Fuzz each harness of tests/fuzz with libFuzzer (clang, AddressSanitizer,
# UndefinedBehaviorSanitizer) for $FUZZ_SECONDS seconds (default 60) from
# its seed corpus, with a fixed libFuzzer seed ($FUZZ_SEED, default 1), or
# for exactly $FUZZ_RUNS inputs when that is set. Prints TAP with the
# figures of each harness as "# fuzz HARNESS: N executions in S s". Fails
# on any crash, leak, sanitizer report or broken invariant, leaving the
# input in $FUZZ_OUT/HARNESS/crashes/ (default build-fuzz/fuzz-out); such
# an input belongs in tests/fuzz/corpus/HARNESS/ as a regression test.
# Harnesses run $FUZZ_JOBS at a time (default: one per CPU).
# Needs clang and libFuzzer (Debian 12: clang, libclang-rt-14-dev).
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${FUZZ_SECONDS:-60}
seed=${FUZZ_SEED:-1}
runs=${FUZZ_RUNS:-}
build=${FUZZ_BUILD:-$root/build-fuzz}
out=${FUZZ_OUT:-$build/fuzz-out}
read -r -a harnesses <<<"${FUZZ_HARNESSES:-framer jsonrpc decision search_terms idscan traceparent jsonfilter segment shard_line localrec}"

bail() {
	echo "1..1"
	echo "not ok 1 - fuzz: $*"
	exit 1
}

command -v clang >/dev/null || bail "clang not found (Debian 12: clang)"
printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n)\n{ return (int)(n && d[0]); }\n' |
	clang -x c -fsanitize=fuzzer -o /dev/null - 2>/dev/null ||
	bail "clang -fsanitize=fuzzer does not link (Debian 12: libclang-rt-14-dev)"

if [ ! -f "$build/build.ninja" ]; then
	log=$(mktemp)
	CC=clang CXX=clang++ meson setup "$build" "$root" \
		-Dbuildtype=debugoptimized \
		-Db_sanitize=address,undefined -Db_lundef=false \
		-Dc_args=-fsanitize=fuzzer-no-link \
		-Dcpp_args=-fsanitize=fuzzer-no-link >"$log" 2>&1 ||
		{ cat "$log"; rm -f "$log"; bail "meson setup $build failed"; }
	rm -f "$log"
fi
mkdir -p "$out"
targets=()
for h in "${harnesses[@]}"; do
	targets+=("tests/fuzz/fuzz_$h")
done
ninja -C "$build" "${targets[@]}" >"$out/build.log" 2>&1 ||
	{ cat "$out/build.log"; bail "building the harnesses failed"; }

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

# One harness: its TAP lines (number $2) in $work/tap.
fuzz_one() {
	local h=$1 i=$2 work=$out/$1 rc start end execs added cov secs
	rm -rf "$work"
	mkdir -p "$work/corpus" "$work/crashes"
	local args=(-seed="$seed" -max_len=8192 -timeout=10 -rss_limit_mb=2048
		-print_final_stats=1 -artifact_prefix="$work/crashes/")
	if [ -n "$runs" ]; then
		args+=(-runs="$runs")
	else
		args+=(-max_total_time="$seconds")
	fi
	case $h in
	jsonrpc | decision | jsonfilter) args+=(-dict="$root/tests/fuzz/json.dict") ;;
	esac
	start=$(date +%s.%N)
	# New inputs go to the first directory (scratch), never the seeds.
	"$build/tests/fuzz/fuzz_$h" "${args[@]}" "$work/corpus" \
		"$root/tests/fuzz/corpus/$h" >"$work/log" 2>&1
	rc=$?
	end=$(date +%s.%N)
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
	added=$(sed -n 's/^stat::new_units_added: *//p' "$work/log" | tail -1)
	cov=$(grep -o 'cov: [0-9]*' "$work/log" | tail -1 | cut -d' ' -f2)
	secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.0f", b - a }')
	{
		echo "# fuzz $h: ${execs:-0} executions in $secs s" \
			"(seed $seed, ${added:-0} new inputs, coverage ${cov:-?})"
		if [ $rc -ne 0 ] || [ -n "$(ls -A "$work/crashes")" ]; then
			echo "not ok $i - fuzz $h: failed (exit $rc); inputs in $work/crashes"
			grep -E 'ERROR|invariant failed|SUMMARY|#[0-9]+ 0x' "$work/log" |
				head -40 | sed 's/^/# /'
		else
			echo "ok $i - fuzz $h"
		fi
	} >"$work/tap"
}

# $FUZZ_JOBS harnesses at a time (default: one per CPU); each still runs
# its full time on a core of its own.
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
i=0
for h in "${harnesses[@]}"; do
	i=$((i + 1))
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
		wait -n
	done
	fuzz_one "$h" "$i" &
done
wait

echo "1..${#harnesses[@]}"
status=0
i=0
for h in "${harnesses[@]}"; do
	i=$((i + 1))
	if [ ! -f "$out/$h/tap" ]; then
		echo "not ok $i - fuzz $h: no result (see $out/$h/log)"
		status=1
		continue
	fi
	cat "$out/$h/tap"
	grep -q '^not ok' "$out/$h/tap" && status=1
done
exit $status
