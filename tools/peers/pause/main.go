// Command pause is the process that holds a pod sandbox's namespaces open: it sleeps until it is
// told to stop, and, as PID 1 of a pod that shares its process namespace, reaps the zombies its
// children leave.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is the pause image tag this binary stands in for; stamped with -ldflags -X.
var version = "dev"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Printf("pause.go %s\n", version)
		return
	}
	if os.Getpid() != 1 {
		// As upstream's pause does: outside a sandbox the process is almost certainly a mistake.
		fmt.Fprintln(os.Stderr, "warning: pause should be the first process")
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		switch sig {
		case syscall.SIGCHLD:
			reap()
		default:
			fmt.Fprintf(os.Stderr, "shutting down, got signal: %v\n", sig)
			os.Exit(0)
		}
	}
}

// reap collects every child that has exited, so that none stays a zombie.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
