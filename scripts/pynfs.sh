#!/bin/bash
# scripts/pynfs.sh [4.0|4.1|all] [ADDR:PORT]
#
# Runs pynfs, the NFSv4 server conformance suite the Linux server's developers
# use, from ../shared/pynfs against a fresh `tarn serve` (new export and state
# directory, 15 s lease and grace so the lease tests do not sleep 90 s each),
# or against ADDR:PORT when given (a server you started yourself). Prints the
# pass/fail/skip counts of each suite and exits non-zero if a test outside the
# allow-list below fails. Without ../shared/pynfs (a user's own clone) it says
# so and skips (exit 0).
#
# Env: PYNFS_SRC (default ../shared/pynfs), TARN_BIN (default
# target/release/tarn, built if missing), PYNFS_WORK (scratch, default
# /var/tmp/tarn-pynfs), PYNFS_TESTS (default "all": test codes or groups).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
VERS=${1:-all}
ADDR=${2:-}
SRC=${PYNFS_SRC:-$REPO/../shared/pynfs}
WORK=${PYNFS_WORK:-/var/tmp/tarn-pynfs}
TESTS=${PYNFS_TESTS:-all}
TARN_BIN=${TARN_BIN:-$REPO/target/release/tarn}
# Debian's python3 (with python3-ply), never another python on PATH.
PY="env PATH=/usr/bin:/bin:/usr/sbin:/sbin python3"

case $VERS in 4.0|4.1|all) ;; *) echo "usage: $0 [4.0|4.1|all] [ADDR:PORT]" >&2; exit 2;; esac
# The server it starts runs as root (it acts as each caller; pynfs makes device nodes).
[ -n "$ADDR" ] || [ "$(id -u)" = 0 ] || exec sudo -E "$REPO/scripts/pynfs.sh" "$@"
if [ ! -d "$SRC/nfs4.1" ]; then
  echo "pynfs: no pynfs at $SRC (it lives in the project's shared folder): skipped"
  exit 0
fi

# ---- the allow-list: tests that may fail, each with the issue that removes it ----------------------
# Keep it short; every entry names why it fails and which issue fixes it.
ALLOW_41='
'
ALLOW_40='
'

# ---- build a private copy (the shared folder is read-only; its symlinks arrive as files) -----------
build_pynfs() {
  local stamp=$WORK/src/.tarn-built
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(cat "$SRC/TARN-README.md" | md5sum)" ]; then return 0; fi
  rm -rf "$WORK/src"; mkdir -p "$WORK"
  cp -r "$SRC" "$WORK/src" && chmod -R u+w "$WORK/src" || return 1
  # A symlink copied as a plain file holding its target: make it a link again.
  local f t
  while IFS= read -r f; do
    t=$(head -c 200 "$f")
    case $t in ../*|./*) [ -e "$(dirname "$f")/$t" ] && { rm -f "$f"; ln -s "$t" "$f"; } ;; esac
  done < <(find "$WORK/src" -type f -size -200c)
  if ! dpkg -s python3-ply >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-ply python3 >/dev/null || return 1
  fi
  (cd "$WORK/src" && $PY setup.py build >"$WORK/build.log" 2>&1) || { echo "pynfs: build failed, see $WORK/build.log"; return 1; }
  cat "$SRC/TARN-README.md" | md5sum >"$stamp"
}
build_pynfs || exit 1

# ---- a fresh server ----------------------------------------------------------------------------------
SPID= RUN=
cleanup() {
  if [ -n "$SPID" ] && kill -0 "$SPID" 2>/dev/null; then
    kill -TERM "$SPID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null
  fi
}
trap cleanup EXIT
trap 'exit 130' INT; trap 'exit 143' TERM

free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start_server() {  # fresh export and state directory per suite
  RUN=$WORK/run-$1
  rm -rf "$RUN"; mkdir -p "$RUN/export" "$RUN/state"; chmod 0777 "$RUN/export"
  local port; port=$(free_port)
  cat >"$RUN/tarn.toml" <<EOF
listen = "127.0.0.1:$port"
state_dir = "$RUN/state"
[[export]]
path = "$RUN/export"
pseudo = "/"
clients = ["127.0.0.1"]
# pynfs runs as root and makes device nodes, like the suite's knfsd setups (no_root_squash).
squash = "none"
# Write delegations too (DELEG2, DELEG24/25's CB_GETATTR), as knfsd grants them.
delegations = "read-write"
[nfs4]
lease_seconds = 15
grace_seconds = 15
EOF
  [ -x "$TARN_BIN" ] || cargo build --release -q -p tarn || return 1
  "$TARN_BIN" serve --config "$RUN/tarn.toml" --log-level "${TARN_LOG_LEVEL:-warn}" >"$RUN/server.log" 2>&1 &
  SPID=$!
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && { ADDR=127.0.0.1:$port; return 0; }
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.1
  done
  echo "pynfs: tarn serve did not start (log: $RUN/server.log)"; tail -5 "$RUN/server.log"; return 1
}

# ---- one suite ---------------------------------------------------------------------------------------
FAILED_SUITES=0
run_suite() {  # 4.0 | 4.1
  local v=$1 own=0 allow json
  if [ -z "$ADDR" ]; then start_server "$v" || { FAILED_SUITES=$((FAILED_SUITES + 1)); return; }; own=1; fi
  json=$WORK/results-$v.json
  rm -f "$json"
  local t0; t0=$(date +%s)
  # --rundeps: a test named alone needs the tests it depends on (MKFILE, MKDIR ...) run first.
  local deps=; [ "$TESTS" = all ] || deps=--rundeps
  (cd "$WORK/src/nfs$v" && timeout 1800 $PY ./testserver.py "$ADDR/" --maketree $deps --json="$json" $TESTS \
     >"$WORK/output-$v.txt" 2>&1)
  echo "pynfs $v: $(( $(date +%s) - t0 ))s, output in $WORK/output-$v.txt"
  if [ "$v" = 4.0 ]; then allow=$ALLOW_40; else allow=$ALLOW_41; fi
  if ! $PY - "$json" "$v" "$allow" "$WORK/output-$v.txt" <<'EOF'
import json, re, sys
path, vers, allow, text = sys.argv[1:5]
allowed = set(allow.split())
try:
    res = json.load(open(path))
except Exception as e:
    print(f"pynfs {vers}: no results ({e})"); sys.exit(1)
bad, allowed_fail = [], []
for tc in res.get("testcase", []):
    if "failure" in tc or "error" in tc:
        (allowed_fail if tc["code"] in allowed else bad).append(tc["code"])
# The counts as pynfs prints them (its JSON does not mark warnings).
m = re.search(r"Of those: (\d+) Skipped, (\d+) Failed, (\d+) Warned, (\d+) Passed", open(text).read())
if not m:
    print(f"pynfs {vers}: no summary in {text}"); sys.exit(1)
sk, fa, wa, pa = map(int, m.groups())
print(f"pynfs {vers}: {pa} passed, {fa} failed, {wa} warned, {sk} skipped of {sk + fa + wa + pa}")
if allowed_fail:
    print(f"pynfs {vers}: allowed failures ({len(allowed_fail)}): {' '.join(sorted(allowed_fail))}")
if bad:
    print(f"pynfs {vers}: FAILED outside the allow-list ({len(bad)}): {' '.join(sorted(bad))}")
    sys.exit(1)
EOF
  then FAILED_SUITES=$((FAILED_SUITES + 1)); fi
  if [ "$own" = 1 ]; then cleanup; SPID=; ADDR=; fi
}

if [ "$VERS" = all ] && [ -z "$ADDR" ]; then
  # Both suites at once, each against its own server: a suite is one Python
  # process, mostly busy in pynfs's own XDR code (RDDR8b alone is ~25 s of
  # it), so on two cores they overlap instead of queueing (CI: 158 + 255 s
  # one after the other). Each prints its summary when both are done.
  SUITES=()
  for v in 4.1 4.0; do
    ( trap cleanup EXIT; trap 'exit 143' TERM INT; run_suite "$v"; exit "$FAILED_SUITES" ) >"$WORK/summary-$v.txt" 2>&1 &
    SUITES+=($!)
  done
  trap 'kill -TERM "${SUITES[@]}" 2>/dev/null; wait; exit 143' TERM INT
  for i in 0 1; do wait "${SUITES[$i]}" || FAILED_SUITES=$((FAILED_SUITES + 1)); done
  cat "$WORK/summary-4.1.txt" "$WORK/summary-4.0.txt"
else
  if [ "$VERS" = all ] || [ "$VERS" = 4.1 ]; then run_suite 4.1; fi
  if [ "$VERS" = all ] || [ "$VERS" = 4.0 ]; then run_suite 4.0; fi
fi
exit $(( FAILED_SUITES > 0 ))
