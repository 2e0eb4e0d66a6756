// The checker itself: hand-made histories that are and are not linearizable, so a run that
// passes means porcupine was asked the right question.
package main

import (
	"path/filepath"
	"testing"

	"github.com/anishathalye/porcupine"
)

func at(ns int64) *int64   { return &ns }
func str(s string) *string { return &s }

func checkOps(t *testing.T, ops []Op) porcupine.CheckResult {
	t.Helper()
	h := &History{Ops: ops}
	// Through the JSON file, as the run writes it.
	path := filepath.Join(t.TempDir(), "history.json")
	if err := h.write(path); err != nil {
		t.Fatal(err)
	}
	read, err := readHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	res, err := read.check(0, "")
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestAReadOfALostAcknowledgedWriteIsRejected(t *testing.T) {
	ops := []Op{
		{Client: 0, Kind: "put", Key: "a", Value: "1", Call: 0, Return: at(10)},
		{Client: 1, Kind: "get", Key: "a", Call: 20, Return: at(30), Output: nil},
	}
	if res := checkOps(t, ops); res != porcupine.Illegal {
		t.Fatalf("a get after an acknowledged put read nothing: want Illegal, got %s", res)
	}
}

func TestAStaleReadAfterANewerOneIsRejected(t *testing.T) {
	ops := []Op{
		{Client: 0, Kind: "put", Key: "a", Value: "1", Call: 0, Return: at(10)},
		{Client: 0, Kind: "put", Key: "a", Value: "2", Call: 20, Return: at(100)},
		{Client: 1, Kind: "get", Key: "a", Call: 30, Return: at(40), Output: str("2")},
		{Client: 2, Kind: "get", Key: "a", Call: 50, Return: at(60), Output: str("1")},
	}
	if res := checkOps(t, ops); res != porcupine.Illegal {
		t.Fatalf("reading 1 after another client read 2: want Illegal, got %s", res)
	}
}

func TestAReadOfADeletedKeyIsRejected(t *testing.T) {
	ops := []Op{
		{Client: 0, Kind: "put", Key: "a", Value: "1", Call: 0, Return: at(10)},
		{Client: 0, Kind: "delete", Key: "a", Call: 20, Return: at(30)},
		{Client: 1, Kind: "get", Key: "a", Call: 40, Return: at(50), Output: str("1")},
	}
	if res := checkOps(t, ops); res != porcupine.Illegal {
		t.Fatalf("reading a deleted value: want Illegal, got %s", res)
	}
}

func TestConcurrentAndUnknownWritesMayTakeEffectLater(t *testing.T) {
	ops := []Op{
		{Client: 0, Kind: "put", Key: "a", Value: "1", Call: 0, Return: at(10)},
		// Sent, never answered: may take effect at any time after 20.
		{Client: 1, Kind: "put", Key: "a", Value: "2", Call: 20, Return: nil},
		{Client: 2, Kind: "get", Key: "a", Call: 30, Return: at(40), Output: str("1")},
		{Client: 2, Kind: "get", Key: "a", Call: 50, Return: at(60), Output: str("2")},
		// Another key is independent.
		{Client: 3, Kind: "get", Key: "b", Call: 0, Return: at(5), Output: nil},
	}
	if res := checkOps(t, ops); res != porcupine.Ok {
		t.Fatalf("an unknown write seen late: want Ok, got %s", res)
	}
}

func TestAnUnknownWriteCannotBeSeenBeforeItsCall(t *testing.T) {
	ops := []Op{
		{Client: 0, Kind: "get", Key: "a", Call: 0, Return: at(10), Output: str("2")},
		{Client: 1, Kind: "put", Key: "a", Value: "2", Call: 20, Return: nil},
	}
	if res := checkOps(t, ops); res != porcupine.Illegal {
		t.Fatalf("a value read before it was written: want Illegal, got %s", res)
	}
}
