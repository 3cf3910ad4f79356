package regiontable_test

import (
	"testing"

	"github.com/cellstore/cell/regiontable"
)

func TestMemoryContract(t *testing.T) {
	runContract(t, impl{
		open: func(t *testing.T) regiontable.Store {
			s := regiontable.NewMemory()
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		expire: func(t *testing.T, s regiontable.Store, id string) {
			if !s.(*regiontable.Memory).ExpireMember(id) {
				t.Fatalf("ExpireMember(%s): not registered", id)
			}
		},
		expireCampaign: func(t *testing.T, s regiontable.Store, id string) bool {
			return s.(*regiontable.Memory).ExpireCampaign(id)
		},
	})
}
