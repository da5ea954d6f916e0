// Command logind is the part of systemd-logind the kubelet's graceful node shutdown talks
// to, for the local environment's real nodes (testkit/env/node/nodes.sh), which run
// without systemd. On the node's own system bus (a real dbus-daemon) it owns
// org.freedesktop.login1, writes the file -ready, and serves on /org/freedesktop/login1:
//
//   - the property org.freedesktop.login1.Manager.InhibitDelayMaxUSec (-inhibit-delay);
//   - the method Inhibit(what, who, why, mode), which hands back a file descriptor: the
//     lock is held until every copy of it is closed (logind's delay locks);
//   - the signal PrepareForShutdown(true), sent on SIGUSR1: a shutdown begins. Once every
//     delay lock is released, or the inhibit delay has passed, it writes the file -done
//     (the node's script then cuts the power) and exits.
//
// Nothing of a shutdown is done here; the kubelet that holds the lock does the graceful
// part (its pods terminated, their status written) exactly as under logind.
package main

import (
	"flag"
	"log"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"
	"github.com/godbus/dbus/v5/prop"
)

const (
	service = "org.freedesktop.login1"
	object  = dbus.ObjectPath("/org/freedesktop/login1")
	manager = "org.freedesktop.login1.Manager"
)

// locks are the delay locks handed out: each pipe's read end, and our copy of its write
// end (sent in the reply, then closed when a shutdown begins: the reply is long gone).
type locks struct {
	mu     sync.Mutex
	reads  []*os.File
	writes []int
}

// Inhibit gives the caller the write end of a new pipe; the lock lasts until it is closed.
func (l *locks) Inhibit(what, who, why, mode string) (dbus.UnixFD, *dbus.Error) {
	r, w, err := os.Pipe()
	if err != nil {
		return 0, dbus.MakeFailedError(err)
	}
	log.Printf("inhibitor: what=%s who=%s mode=%s why=%q", what, who, mode, why)
	fd, err := syscall.Dup(int(w.Fd()))
	w.Close()
	if err != nil {
		r.Close()
		return 0, dbus.MakeFailedError(err)
	}
	l.mu.Lock()
	l.reads = append(l.reads, r)
	l.writes = append(l.writes, fd)
	l.mu.Unlock()
	return dbus.UnixFD(fd), nil
}

// released waits until every lock's write end is closed (its read end sees EOF).
func (l *locks) released() {
	l.mu.Lock()
	reads := l.reads
	for _, fd := range l.writes {
		syscall.Close(fd)
	}
	l.writes = nil
	l.mu.Unlock()
	buf := make([]byte, 1)
	for _, r := range reads {
		for {
			if _, err := r.Read(buf); err != nil {
				break
			}
		}
	}
}

func main() {
	address := flag.String("address", "", "the bus to serve on (DBUS_SYSTEM_BUS_ADDRESS)")
	delay := flag.Duration("inhibit-delay", 30*time.Second, "InhibitDelayMaxUSec")
	ready := flag.String("ready", "", "file written once the service is on the bus")
	done := flag.String("done", "", "file written once a shutdown's delay locks are released")
	flag.Parse()
	if *address == "" || *ready == "" || *done == "" {
		log.Fatal("-address, -ready and -done are needed")
	}
	conn, err := dbus.Connect(*address)
	if err != nil {
		log.Fatalf("connecting to %s: %v", *address, err)
	}
	l := &locks{}
	if err := conn.ExportMethodTable(map[string]interface{}{"Inhibit": l.Inhibit}, object, manager); err != nil {
		log.Fatal(err)
	}
	props, err := prop.Export(conn, object, prop.Map{manager: {
		"InhibitDelayMaxUSec": {Value: uint64(delay.Microseconds()), Emit: prop.EmitFalse},
	}})
	if err != nil {
		log.Fatal(err)
	}
	node := &introspect.Node{Name: string(object), Interfaces: []introspect.Interface{
		introspect.IntrospectData, prop.IntrospectData,
		{Name: manager, Methods: introspect.Methods(l), Properties: props.Introspection(manager)},
	}}
	if err := conn.Export(introspect.NewIntrospectable(node), object, "org.freedesktop.DBus.Introspectable"); err != nil {
		log.Fatal(err)
	}
	reply, err := conn.RequestName(service, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		log.Fatalf("owning %s: reply %v, %v", service, reply, err)
	}
	log.Printf("serving %s on %s (inhibit delay %s)", service, *address, *delay)
	if err := os.WriteFile(*ready, nil, 0o644); err != nil {
		log.Fatal(err)
	}

	shutdown := make(chan os.Signal, 1)
	signal.Notify(shutdown, syscall.SIGUSR1)
	<-shutdown
	log.Printf("shutdown: PrepareForShutdown(true)")
	if err := conn.Emit(object, manager+".PrepareForShutdown", true); err != nil {
		log.Fatal(err)
	}
	released := make(chan struct{})
	go func() { l.released(); close(released) }()
	select {
	case <-released:
		log.Printf("shutdown: every delay lock released")
	case <-time.After(*delay):
		log.Printf("shutdown: inhibit delay of %s passed", *delay)
	}
	if err := os.WriteFile(*done, []byte(time.Now().UTC().Format(time.RFC3339Nano)+"\n"), 0o644); err != nil {
		log.Fatal(err)
	}
}
