package server

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/cellstore/cell/wal"
	"github.com/cellstore/cell/wire"
)

// TestProposalError checks what a writer is told for each raft error: a
// record raft refused before appending it is Unavailable (the client tries
// again, at the new leader), one that may have entered the log is
// OutcomeUnknown. A leadership transfer (the balancer's, a drain's) made
// preloads fail with "write outcome unknown" when its refusal was taken
// for the second kind.
func TestProposalError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want wire.Status
	}{
		{raft.ErrNotLeader, wire.StatusUnavailable},
		{raft.ErrEnqueueTimeout, wire.StatusUnavailable},
		{raft.ErrLeadershipTransferInProgress, wire.StatusUnavailable},
		{fmt.Errorf("wrapped: %w", raft.ErrLeadershipTransferInProgress), wire.StatusUnavailable},
		{raft.ErrLeadershipLost, wire.StatusOutcomeUnknown},
		{raft.ErrRaftShutdown, wire.StatusOutcomeUnknown},
		{wal.ErrSyncFailed, wire.StatusOutcomeUnknown},
	} {
		var se *wire.StatusError
		if err := proposalError(tc.err); !errors.As(err, &se) || se.Status != tc.want {
			t.Errorf("proposalError(%v) = %v, want status %v", tc.err, err, tc.want)
		}
	}
}
