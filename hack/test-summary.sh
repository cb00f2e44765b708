#!/usr/bin/env bash
# Passes `go test -v` output through and ends with a one-line-per-test summary, so a CI log shows at a
# glance what ran and how long it took, then, for each failed test, its own log lines (the story's
# given/when/then and the failure itself): with stories running in parallel and the controllers' logs
# dumped on failure, the line that says why is otherwise hundreds of lines above the end of the log.
# A failed story's namespace Warning events (logged by its cleanup, after the failure) are printed
# before its other lines, so the failure is the last of them: CI shows a log's end. A log line of
# several lines (a failure listing what it found) keeps its first keepcont continuation lines; a process's
# log dumped on failure ("... logs:") keeps none here (it is whole in the log above).
# The Makefile runs with pipefail, so go test's own exit status decides; we also fail on a FAIL line in
# case the pipe is used elsewhere.
set -uo pipefail
# shellcheck disable=SC2016 # an awk program
exec "$(dirname "${BASH_SOURCE[0]}")/line-awk" -v keep=25 -v keepwarn=16 -v keepcont=40 '
  BEGIN { cont = -1 }
  { print; fflush() }
  # Whose output follows: go test names the test before a parallel test writes.
  /^=== (RUN|CONT|NAME|PAUSE) / { test = $3; cont = -1; next }
  # A test'"'"'s own log line ("    file_test.go:42: ..."), not a process'"'"'s log it passes on (indented
  # further, without a file:line).
  /^    +[A-Za-z0-9_]+\.go:[0-9]+: (Warning event in |the namespace .* Warning events)/ {
    n = ++wcount[test]; warns[test, n] = $0; cont = -1
    if (n > keepwarn) delete warns[test, n - keepwarn]
    next
  }
  /^    +[A-Za-z0-9_]+\.go:[0-9]+: / {
    n = ++count[test]; lines[test, n] = $0; cont = / logs:$/ ? keepcont + 1 : 0
    if (n > keep) delete lines[test, n - keep]
    next
  }
  # The continuation of the last log line of the test: go test indents the further lines of a message by four
  # more spaces. Any other line ends the message.
  /^        / && cont >= 0 {
    if (++cont <= keepcont) lines[test, count[test]] = lines[test, count[test]] "\n" $0
    else if (cont == keepcont + 1 && keepcont > 0) lines[test, count[test]] = lines[test, count[test]] "\n        [more lines left out]"
    next
  }
  { cont = -1 }
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
