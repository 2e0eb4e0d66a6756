// The history of a linearizability run (client operations with their call and return
// times, as JSON) and its check by porcupine's checker against a key-value model,
// partitioned by key.
package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// Op is one client operation of a history.
type Op struct {
	Client int    `json:"client"`
	Kind   string `json:"op"` // "put", "get" or "delete"
	Key    string `json:"key"`
	// The value a put wrote.
	Value string `json:"value,omitempty"`
	// Nanoseconds since the run began.
	Call int64 `json:"call_ns"`
	// Nil when the outcome is unknown (a put or delete that was sent and never answered:
	// it may take effect at any time after its call, so it returns "at infinity").
	Return *int64 `json:"return_ns"`
	// What a get read: nil when the key was absent.
	Output *string `json:"output,omitempty"`
}

// History is what the linearizability run writes.
type History struct {
	Ops []Op `json:"ops"`
}

func readHistory(path string) (*History, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var h History
	if err := json.Unmarshal(data, &h); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i, op := range h.Ops {
		switch op.Kind {
		case "put", "delete":
		case "get":
			if op.Return == nil {
				return nil, fmt.Errorf("%s: op %d: a get without an answer says nothing; leave it out", path, i)
			}
		default:
			return nil, fmt.Errorf("%s: op %d: unknown op %q", path, i, op.Kind)
		}
	}
	return &h, nil
}

func (h *History) write(path string) error {
	data, err := json.MarshalIndent(h, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// kvInput is an operation's input in the model.
type kvInput struct {
	Kind  string
	Key   string
	Value string
}

// kvOutput is what a get read (nil: absent).
type kvOutput struct {
	Value *string
}

// absent is the model's state of a key that holds no value (the values written are never
// empty, so "" stands for absent).
const absent = ""

// kvModel is the sequential specification: per key, a register that puts set, deletes clear
// and gets read.
var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			key := op.Input.(kvInput).Key
			byKey[key] = append(byKey[key], op)
		}
		keys := make([]string, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() interface{} { return absent },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		in := input.(kvInput)
		st := state.(string)
		switch in.Kind {
		case "put":
			return true, in.Value
		case "delete":
			return true, absent
		default:
			out := output.(kvOutput)
			read := absent
			if out.Value != nil {
				read = *out.Value
			}
			return read == st, st
		}
	},
	DescribeOperation: func(input, output interface{}) string {
		in := input.(kvInput)
		switch in.Kind {
		case "put":
			return fmt.Sprintf("put(%q, %q)", in.Key, in.Value)
		case "delete":
			return fmt.Sprintf("delete(%q)", in.Key)
		default:
			out := output.(kvOutput)
			if out.Value == nil {
				return fmt.Sprintf("get(%q) -> null", in.Key)
			}
			return fmt.Sprintf("get(%q) -> %q", in.Key, *out.Value)
		}
	},
}

// operations turns h into porcupine's operations; an unknown outcome returns after every
// other operation (porcupine's convention for operations that never returned).
func (h *History) operations() []porcupine.Operation {
	ops := make([]porcupine.Operation, 0, len(h.Ops))
	for _, op := range h.Ops {
		ret := int64(math.MaxInt64)
		if op.Return != nil {
			ret = *op.Return
		}
		ops = append(ops, porcupine.Operation{
			ClientId: op.Client,
			Input:    kvInput{Kind: op.Kind, Key: op.Key, Value: op.Value},
			Call:     op.Call,
			Output:   kvOutput{Value: op.Output},
			Return:   ret,
		})
	}
	return ops
}

// check runs porcupine on h (timeout 0: until it decides) and, when visualize is not
// empty and the history is not linearizable, writes porcupine's HTML visualization there.
func (h *History) check(timeout time.Duration, visualize string) (porcupine.CheckResult, error) {
	res, info := porcupine.CheckOperationsVerbose(kvModel, h.operations(), timeout)
	if res == porcupine.Illegal && visualize != "" {
		if err := porcupine.VisualizePath(kvModel, info, visualize); err != nil {
			return res, err
		}
	}
	return res, nil
}
