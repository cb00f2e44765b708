package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// restartComponent restarts a component of the kwokctl cluster as kwokctl started it: the same
// command line, working directory and environment, its output appended to its log, its pid file
// rewritten. kwokctl 0.8.0 stops and starts whole clusters only. Used for kwok's controller, which
// replays a stage the API server refuses for ever (see scale.go, where it is called); it returns the
// new process's pid.
func (e env) restartComponent(name string) (int, error) {
	dir := filepath.Dir(e.c.Kubeconfig)
	pid, err := e.componentPID(name)
	if err != nil {
		return 0, err
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return 0, err
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return 0, err
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		return 0, err
	}
	args := nulSeparated(cmdline)
	if len(args) == 0 {
		return 0, fmt.Errorf("%s (pid %d) has no command line", name, pid)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return 0, fmt.Errorf("stopping %s: %w", name, err)
	}
	for deadline := time.Now().Add(time.Minute); syscall.Kill(pid, 0) == nil; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s (pid %d) still runs a minute after SIGTERM", name, pid)
		}
	}
	log, err := os.OpenFile(filepath.Join(dir, "logs", name+".log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o640)
	if err != nil {
		return 0, err
	}
	defer log.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = cwd, nulSeparated(environ), log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // outlives the bench, as kwokctl's do
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting %s: %w", name, err)
	}
	newPID := cmd.Process.Pid
	_ = cmd.Process.Release()
	return newPID, os.WriteFile(filepath.Join(dir, "pids", name+".pid"), []byte(strconv.Itoa(newPID)), 0o644)
}

// nulSeparated splits /proc's cmdline and environ files: each entry ends with a NUL, and an entry may
// be empty (an empty argument).
func nulSeparated(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(bytes.TrimSuffix(b, []byte{0})), "\x00")
}
