// Command pause is the sandbox ("pause") process of the local environment's real nodes:
// the first process of every pod, holding its namespaces until the runtime stops it.
// It reaps the orphans a shared process namespace hands it and exits on SIGTERM or
// SIGINT. Built here because no image can be pulled on these machines.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
