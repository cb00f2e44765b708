#!/usr/bin/env bash
# Passes `go test -v` output through and ends with a one-line-per-test summary, so a CI log shows at a
# glance what ran and how long it took, then, for each failed test, its own log lines (the story's
# given/when/then and the failure itself): with stories running in parallel and the controllers' logs
# dumped on failure, the line that says why is otherwise hundreds of lines above the end of the log.
# The Makefile runs with pipefail, so go test's own exit status decides; we also fail on a FAIL line in
# case the pipe is used elsewhere.
set -uo pipefail
exec awk -v keep=25 '
  { print; fflush() }
  # Whose output follows: go test names the test before a parallel test writes.
  /^=== (RUN|CONT|NAME|PAUSE) / { test = $3; next }
  # A test'"'"'s own log line ("    file_test.go:42: ..."), not a process'"'"'s log it passes on (indented
  # further, without a file:line).
  /^    +[A-Za-z0-9_]+\.go:[0-9]+: / {
    n = ++count[test]; lines[test, n] = $0
    if (n > keep) delete lines[test, n - keep]
    next
  }
  /^ *--- FAIL/ || /^FAIL/ { failed = 1; summary[++s] = $0; if ($1 == "---") failures[++f] = $3; next }
  /^ *--- (PASS|SKIP)/ || /^ok / { summary[++s] = $0 }
  END {
    print "== e2e summary"
    for (i = 1; i <= s; i++) print summary[i]
    for (i = 1; i <= f; i++) {
      t = failures[i]
      if (!count[t]) continue
      print "== " t ": its last log lines"
      for (n = count[t] - keep + 1; n <= count[t]; n++) if ((t, n) in lines) print lines[t, n]
    }
    exit failed
  }
'
