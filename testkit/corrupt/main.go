// Command corrupt changes one stored value in the backend of a stopped etcd member, so
// that its data differs from its peers' while its revision stays the same: the silent
// divergence the operator's corruption tests need etcd to find.
//
// Usage: corrupt <data dir>/member/snap/db
//
// It flips the lowest bit of the last byte of the newest entry of the "key" bucket (the
// key-value store by revision; with no lease, that byte is the value's last).
package main

import (
	"errors"
	"fmt"
	"os"

	bolt "go.etcd.io/bbolt"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: corrupt <data dir>/member/snap/db")
		os.Exit(2)
	}
	if err := flipNewest(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "corrupt:", err)
		os.Exit(1)
	}
}

func flipNewest(path string) error {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.Update(func(tx *bolt.Tx) error {
		bucket := tx.Bucket([]byte("key"))
		if bucket == nil {
			return errors.New("no \"key\" bucket: not an etcd v3 backend")
		}
		revision, value := bucket.Cursor().Last()
		if revision == nil || len(value) == 0 {
			return errors.New("no revision stored")
		}
		changed := append([]byte(nil), value...)
		changed[len(changed)-1] ^= 0x01
		if err := bucket.Put(append([]byte(nil), revision...), changed); err != nil {
			return err
		}
		fmt.Printf("flipped the last byte of revision entry %x\n", revision)
		return nil
	})
}
