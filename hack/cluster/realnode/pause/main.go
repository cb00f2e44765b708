// Command pause is the pod sandbox ("infra") container of the real node (hack/cluster/realnode.sh):
// it holds the pod's namespaces and does nothing else, like Kubernetes' own pause (build/pause):
// it sleeps until SIGINT or SIGTERM (then exits 0) and, as PID 1 of a pod sharing its process
// namespace, reaps orphaned children. Built static (CGO_ENABLED=0) into a FROM scratch image, so the
// node needs no registry for its sandbox image.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (configmap-attacher real node)")
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "Warning: pause should be the first process")
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "Shutting down, got signal: %v\n", s)
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
