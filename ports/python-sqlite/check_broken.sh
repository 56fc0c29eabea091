#!/usr/bin/env bash
# Proves that `leasehold verify --store-cmd` catches each deliberately broken
# variant of the Python port (LEASEHOLD_PY_BUG, see store.py's BUGS): for
# each, the checks named below must fail with violations, and each must
# report a replay command that carries the variant. Run from the
# repository root: ports/python-sqlite/check_broken.sh [BUDGET] [REPORTS]
set -euo pipefail
budget=${1:-1m}
reports=${2:-reports/port-broken}
go build -o "${TMPDIR:-/tmp}/leasehold-check-broken" ./cmd/leasehold
leasehold="${TMPDIR:-/tmp}/leasehold-check-broken"

# variant -> the checks that must catch it: every variant is caught by
# conformance, and the second check (one that catches it on every run, not
# by luck) shows each other check biting through the protocol too.
# complete_ignores_generation needs a stale Complete of the same worker,
# which rapid's sequences (restart) reach in most runs and concurrent
# histories in some, not in every one, so its second check is the scenario
# written for it; hook_fault_commits shows linearizability.
variants=(
  "complete_ignores_generation conformance/store-cmd,scenarios/store-cmd"
  "idempotency_ignores_fingerprint conformance/store-cmd,scenarios/store-cmd"
  "cancel_leaves_claimable conformance/store-cmd,rapid/store-cmd"
  "fingerprint_not_canonical conformance/store-cmd,rapid/store-cmd"
  "hook_fault_commits conformance/store-cmd,linearizability/store-cmd"
)

mkdir -p "$reports"
missed=()
for entry in "${variants[@]}"; do
  read -r bug checks <<<"$entry"
  dir="$reports/$bug"
  echo "== $bug: expecting $checks to catch it"
  set +e
  "$leasehold" verify --store-cmd "LEASEHOLD_PY_BUG=$bug python3 ports/python-sqlite/store.py" \
    --only "$checks" --budget "$budget" --reports "$dir" >"$dir.log" 2>&1
  status=$?
  set -e
  if [ "$status" -eq 0 ]; then
    echo "   NOT CAUGHT: verify passed (log: $dir.log)"
    missed+=("$bug")
    continue
  fi
  if ! python3 - "$dir/verify.json" "$bug" "$checks" <<'PY'
import json, sys
report, bug, checks = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3].split(",")
ok = True
for want in checks:
    rows = [c for c in report["checks"] if c["name"] + "/" + c["store"] == want]
    if not rows:
        print("   %s did not run" % want); ok = False; continue
    c = rows[0]
    replay = c.get("replay", "")
    caught = c["status"] == "fail" and c["violations"] > 0 and ("LEASEHOLD_PY_BUG=" + bug) in replay
    print("   %-28s %s, %d violations%s" % (want, c["status"], c["violations"],
          ("; failed: " + ", ".join(c.get("failures", [])[:3])) if c.get("failures") else ""))
    print("   %-28s replay: %s" % ("", replay or "(none)"))
    ok = ok and caught
sys.exit(0 if ok else 1)
PY
  then
    echo "   NOT CAUGHT as expected (log: $dir.log)"
    missed+=("$bug")
  fi
  grep -m1 -E "want |store protocol finding|model expects|does not pass|not linearizable|Illegal" "$dir.log" | sed 's/^ */   finding: /' | cut -c1-240 || true
done
if [ "${#missed[@]}" -ne 0 ]; then
  echo "check_broken: not caught as expected: ${missed[*]} (the lines under each == above say which check missed)"
  exit 1
fi
echo "check_broken: every broken variant was caught, each with a replay command"
