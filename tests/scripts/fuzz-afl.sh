#!/usr/bin/env bash
# Long fuzzing runs with afl++ (Debian's package) on the stable toolchain: the
# nodemem-fuzz harness built with LLVM's SanitizerCoverage and linked with afl++'s
# runtime (what cargo-afl does, without its nightly-free but network-needing build),
# then afl-fuzz on one target for a while. Findings stay in the cache, outside the repo.
#
#   tests/scripts/fuzz-afl.sh <target> [seconds]      (default 600 s)
#   targets: memory-value memory-events memory-stat pressure range-list controllers meminfo
#            hugepages quantity cgroup-path
set -euo pipefail
cd "$(dirname "$0")/../.."
target=${1:?usage: $0 <target> [seconds]}
seconds=${2:-600}
runtime=/usr/lib/afl/afl-compiler-rt.o
if ! command -v afl-fuzz >/dev/null || [ ! -f "$runtime" ]; then
  echo "afl++ is not installed (afl-fuzz and $runtime): apt-get install afl++" >&2
  exit 1
fi
out=${NODEMEM_FUZZ_DIR:-$HOME/.cache/nodemem/fuzz}
export CARGO_TARGET_DIR="$out/target"
RUSTFLAGS="-C debug-assertions -C overflow-checks -C passes=sancov-module -C codegen-units=1 \
  -C llvm-args=-sanitizer-coverage-level=3 -C llvm-args=-sanitizer-coverage-trace-pc-guard \
  -C llvm-args=-sanitizer-coverage-prune-blocks=0 -C opt-level=2 -C link-arg=$runtime" \
  cargo build --release --locked -p nodemem-fuzz
harness="$CARGO_TARGET_DIR/release/nodemem-fuzz"

# Seeds: what the kernel, sysfs and the apiserver print.
seeds="$out/seeds/$target"
mkdir -p "$seeds"
seed() { printf '%b' "$2" > "$seeds/$1"; }
case "$target" in
  memory-value) seed a '123456789\n'; seed b 'max\n' ;;
  memory-events) seed a 'low 0\nhigh 12\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n' ;;
  memory-stat) seed a 'anon 8425472\nfile 104857600\nactive_file 20971520\ninactive_file 83886080\npgfault 4521\n' ;;
  pressure) seed a 'some avg10=0.12 avg60=0.05 avg300=0.01 total=12345\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=99\n' ;;
  range-list) seed a '0-1\n'; seed b '0,2-4,7\n'; seed c '\n' ;;
  controllers) seed a 'cpuset cpu io memory hugetlb pids rdma misc\n' ;;
  meminfo) cp crates/nodemem-model/tests/fixtures/vm-node0-meminfo.txt "$seeds/a" ;;
  hugepages) { printf 'hugepages-2048kB\n8\n'; cat crates/nodemem-model/tests/fixtures/vm-node1-meminfo.txt; } > "$seeds/a" ;;
  quantity) seed a '128Mi'; seed b '1.5Gi'; seed c '100m'; seed d '1e3' ;;
  cgroup-path) seed a '8f3fbebd-db9a-4e64-bfb9-ff574354b7c4\n56fe10581f80048c33595cac76876af2' ;;
  *) echo "unknown target $target" >&2; exit 2 ;;
esac

findings="$out/findings/$target"
mkdir -p "$out/findings"
AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 AFL_QUIET=1 \
  afl-fuzz -V "$seconds" -i "$seeds" -o "$findings" -- "$harness" "$target" >"$out/$target.log" 2>&1 || true
crashes=$(find "$findings" -path '*crashes/id:*' 2>/dev/null | wc -l)
execs=$(awk -F: '/^execs_done/ {gsub(/ /, "", $2); print $2}' "$findings"/default/fuzzer_stats 2>/dev/null || echo 0)
paths=$(awk -F: '/^corpus_count/ {gsub(/ /, "", $2); print $2}' "$findings"/default/fuzzer_stats 2>/dev/null || echo 0)
echo "$target: ${seconds} s, ${execs} executions, ${paths} inputs in the corpus, ${crashes} crashes (in $findings)"
[ "$crashes" = 0 ]
