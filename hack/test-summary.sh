#!/usr/bin/env bash
# Passes `go test -v` output through and ends with a one-line-per-test summary, so a CI log shows at a
# glance what ran and how long it took, then, for each failed test, its own log lines (the story's
# given/when/then and the failure itself): with stories running in parallel and the controllers' logs
# dumped on failure, the line that says why is otherwise hundreds of lines above the end of the log.
# A failed story's namespace Warning events (logged by its cleanup, after the failure) are printed
# before its other lines, so the failure is the last of them: CI shows a log's end.
# The Makefile runs with pipefail, so go test's own exit status decides; we also fail on a FAIL line in
# case the pipe is used elsewhere.
set -uo pipefail
# shellcheck disable=SC2016 # an awk program
exec "$(dirname "${BASH_SOURCE[0]}")/line-awk" -v keep=25 -v keepwarn=16 '
  { print; fflush() }
  # Whose output follows: go test names the test before a parallel test writes.
  /^=== (RUN|CONT|NAME|PAUSE) / { test = $3; next }
  # A test'"'"'s own log line ("    file_test.go:42: ..."), not a process'"'"'s log it passes on (indented
  # further, without a file:line).
  /^    +[A-Za-z0-9_]+\.go:[0-9]+: (Warning event in |the namespace .* Warning events)/ {
    n = ++wcount[test]; warns[test, n] = $0
    if (n > keepwarn) delete warns[test, n - keepwarn]
    next
  }
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
      if (wcount[t]) print "== " t ": the Warning events of its namespaces"
      for (n = wcount[t] - keepwarn + 1; n <= wcount[t]; n++) if ((t, n) in warns) print warns[t, n]
      if (!count[t]) continue
      print "== " t ": its last log lines"
      for (n = count[t] - keep + 1; n <= count[t]; n++) if ((t, n) in lines) print lines[t, n]
    }
    exit failed
  }
'
