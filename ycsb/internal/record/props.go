package record

import (
	"fmt"
	"strings"

	"github.com/magiconair/properties"
	"github.com/pingcap/go-ycsb/pkg/prop"
)

// FieldCount returns the workload's fieldcount (YCSB's default 10).
func FieldCount(p *properties.Properties) int {
	return int(p.GetInt64(prop.FieldCount, prop.FieldCountDefault))
}

// List splits a comma-separated property value, dropping empty items.
func List(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// PropertyError is a binding's property with a value it cannot use.
type PropertyError struct {
	Name, Value string
	Err         error
}

func (e *PropertyError) Error() string {
	return fmt.Sprintf("property %s=%q: %v", e.Name, e.Value, e.Err)
}

func (e *PropertyError) Unwrap() error { return e.Err }
