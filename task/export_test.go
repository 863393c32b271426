package task

import "encoding/json"

// MarshalJSONReflect is what MarshalJSON was before json.go: json.Marshal
// of taskJSON, by reflection. FuzzAppendJSON holds AppendJSON to its bytes.
func (t Task) MarshalJSONReflect() ([]byte, error) {
	w := taskJSON{taskAlias: taskAlias(t)}
	w.Payload, w.PayloadBase64 = payloadOut(t.Payload)
	if t.Trace != nil {
		w.TraceParent, w.TraceState = t.Trace.Parent, t.Trace.State
	}
	return json.Marshal(w)
}

// UnmarshalJSONReflect is UnmarshalJSON by encoding/json alone.
func (t *Task) UnmarshalJSONReflect(b []byte) error { return t.unmarshalReflect(b) }

// UnmarshalFast is UnmarshalJSON's hand-written path alone: false where it
// leaves b to encoding/json.
func (t *Task) UnmarshalFast(b []byte) bool { return t.unmarshalFast(b) }
