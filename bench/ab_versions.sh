#!/usr/bin/env bash
# Regression check between two commits on this machine: OLD and the working tree, alternated N times.
# Usage: bash bench/ab_versions.sh OLD_COMMIT [N]   (prints one JSON line per run: "old {...}" / "new {...}")
set -euo pipefail
cd "$(dirname "$0")/.."
old=$(mktemp -d); trap 'git worktree remove --force "$old" >/dev/null 2>&1 || rm -rf "$old"' EXIT
git worktree add -q --detach "$old" "$1"
for _ in $(seq "${2:-5}"); do
  for v in old new; do
    dir=$PWD; [ $v = old ] && dir=$old
    echo "$v $(cd "$dir" && PYTHONPATH=$dir "$OLDPWD/.venv/bin/python" "$OLDPWD/bench/ab_run.py" 2>/dev/null | tail -1)"
  done
done
