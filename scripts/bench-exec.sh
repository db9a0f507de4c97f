#!/usr/bin/env bash
# `flotilla exec` against gitlab-ci-local on the same 20-job shell pipeline, side by side.
#
#   scripts/bench-exec.sh [ROUNDS]       (default 5)
#
# Installs gitlab-ci-local from the npm registry into a cache directory if it is not there
# (~/.cache/flotilla-bench/gitlab-ci-local; GITLAB_CI_LOCAL=/path/to/gitlab-ci-local uses
# another), builds flotilla in release, and runs the pipeline
# crates/flotilla/benches/pipeline-20-jobs.gitlab-ci.yml in a temporary git repository:
# with hyperfine when it is installed, otherwise with the harness-less cargo bench
# `exec_vs_gitlab_ci_local` (interleaved rounds). Both print wall times and flotilla's ratio
# to each gitlab-ci-local mode: its default (shell jobs in the project directory) and
# --shell-isolation (each job in its own copy, as flotilla runs them). The target is a ratio
# of at most 0.35 (issue 33).
#
# Needs node and npm, git, and rsync (gitlab-ci-local copies the tree with it).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
rounds="${1:-5}"
log() { printf '[bench-exec] %s\n' "$*" >&2; }

for tool in node npm git rsync; do
  command -v "$tool" >/dev/null || { log "$tool is required (rsync: apt-get install rsync)"; exit 2; }
done

# gitlab-ci-local: the newest release runs on Node 22 or later (it uses Set.prototype.union);
# on older Node the last release that still runs there is installed instead.
cache="${XDG_CACHE_HOME:-$HOME/.cache}/flotilla-bench/gitlab-ci-local"
gcl="${GITLAB_CI_LOCAL:-$cache/node_modules/.bin/gitlab-ci-local}"
runs() { "$1" --version >/dev/null 2>&1; }
if [ -z "${GITLAB_CI_LOCAL:-}" ] && ! runs "$gcl"; then
  node_major="$(node -p 'process.versions.node.split(".")[0]')"
  version="${GCL_VERSION:-latest}"
  if [ -z "${GCL_VERSION:-}" ] && [ "$node_major" -lt 22 ]; then version=4.73.0; fi
  log "installing gitlab-ci-local@$version into $cache (node $node_major)"
  mkdir -p "$cache"
  npm install --silent --no-audit --no-fund --prefix "$cache" "gitlab-ci-local@$version" >&2
fi
runs "$gcl" || { log "$gcl does not run"; exit 2; }
log "gitlab-ci-local $("$gcl" --version) at $gcl"

log "building flotilla (release)"
(cd "$root" && cargo build --release -p flotilla >&2)
flotilla="$root/target/release/flotilla"

if ! command -v hyperfine >/dev/null; then
  log "hyperfine not found: running the cargo bench (interleaved rounds)"
  cd "$root"
  GITLAB_CI_LOCAL="$gcl" exec cargo bench -p flotilla --bench exec_vs_gitlab_ci_local -- "$rounds"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
repo="$work/project"
mkdir -p "$repo/src"
cp "$root/crates/flotilla/benches/pipeline-20-jobs.gitlab-ci.yml" "$repo/.gitlab-ci.yml"
for i in $(seq 0 199); do printf '#include <h%d.h>\nint f%d(void) { return %d; }\n' "$i" "$i" "$i"; done >"$repo/src/main.c"
git -C "$repo" init -q -b main
git -C "$repo" remote add origin https://gitlab.example.com/bench/project.git
git -C "$repo" add -A
git -C "$repo" -c user.name=Bench -c user.email=bench@flotilla.invalid commit -q -m bench

cd "$repo"
hyperfine --warmup 1 --runs "$rounds" --prepare 'git clean -ffdxq' \
  --export-json "$work/results.json" \
  -n 'flotilla exec' "$flotilla exec" \
  -n 'gitlab-ci-local' "$gcl" \
  -n 'gitlab-ci-local --shell-isolation' "$gcl --shell-isolation"
node -e '
  const r = require(process.argv[1]).results;
  const med = (n) => r.find((x) => x.command === n).median;
  const f = med("flotilla exec");
  for (const other of ["gitlab-ci-local", "gitlab-ci-local --shell-isolation"]) {
    console.log(`flotilla / ${other}: ${(f / med(other)).toFixed(2)} (median wall time; target at most 0.35)`);
  }
' "$work/results.json"
