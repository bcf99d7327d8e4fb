#!/usr/bin/env bash
# make test's three parts, with their times: lint and the unit tests run
# beside the lab pass instead of before it. They share nothing with the lab
# (local files, local plays over tmp_path), and the lab pass's first steps
# (the lab image, the nodes, `site.yml --check` on the fresh nodes) leave
# about half of this machine's two cores idle: an Ansible run waits on its
# round trips. The lab pass's output streams as it comes; each of the
# other two parts is printed whole when it ends. A failed lint or unit run
# stops the lab pass at once (and takes the lab down): a red run should not
# cost the hour. Called by `make test` once prereqs, venv and bundle are
# made; the parts are the Makefile's lint-run, unit-run and molecule-run.
set -uo pipefail
cd "$(dirname "$0")/.."
MAKE=${MAKE:-make}
logs=.cache/test
mkdir -p "$logs"
rm -f "$logs"/*.rc "$logs"/*.log
started=$(date +%s)

part() {  # part NAME TARGET: run one make target, its output to a file, rc and seconds after
  local name=$1 target=$2 t0 rc
  t0=$(date +%s)
  "$MAKE" --no-print-directory "$target" >"$logs/$name.log" 2>&1
  rc=$?
  echo "$rc $(($(date +%s) - t0))" >"$logs/$name.rc"
  return "$rc"
}

show() {  # show NAME LABEL: print a finished part's output and time
  local name=$1 label=$2 rc secs
  read -r rc secs <"$logs/$name.rc"
  echo "== $label (beside the lab pass): output"
  cat "$logs/$name.log"
  echo "== $label: $secs s (exit $rc)"
}

# lint, then the unit tests: one after the other, so that together they
# take one core and the lab pass keeps the other
( part lint lint-run && part unit unit-run ) &
checks=$!

# the lab pass in a process group of its own, so it can be stopped whole
setsid bash -c 't0=$(date +%s); "$0" --no-print-directory molecule-run; rc=$?;
  echo "== lab pass (molecule -s lab): $(( $(date +%s) - t0 )) s"; exit $rc' "$MAKE" &
lab=$!

checks_rc=""
lab_rc=""
while [[ -z $checks_rc || -z $lab_rc ]]; do
  wait -n -p ended "$checks" "$lab" 2>/dev/null
  rc=$?
  if [[ ${ended:-} == "$checks" ]]; then
    checks_rc=$rc
    [[ -f $logs/lint.rc ]] && show lint "lint"
    [[ -f $logs/unit.rc ]] && show unit "unit tests"
    if [[ $checks_rc -ne 0 && -z $lab_rc ]]; then
      echo "== lint or unit tests failed: stopping the lab pass and taking the lab down"
      kill -TERM -- "-$lab" 2>/dev/null
      wait "$lab"
      lab_rc=143
      .venv/bin/python tools/lab.py down >/dev/null 2>&1 || true
    fi
  elif [[ ${ended:-} == "$lab" ]]; then
    lab_rc=$rc
  else
    break
  fi
done

echo "== make test: $(($(date +%s) - started)) s in all"
[[ $checks_rc == 0 && $lab_rc == 0 ]]
