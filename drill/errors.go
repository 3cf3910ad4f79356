package drill

import "errors"

// Errors returned by the package. Test with errors.Is: they are wrapped with
// detail.
var (
	// ErrInvalid: a Workload, Schedule or Options field is out of range.
	ErrInvalid = errors.New("drill: invalid parameter")
	// ErrNoServer: the server to strike could not be chosen (no such
	// server, or none the target can strike).
	ErrNoServer = errors.New("drill: no server to strike")
	// ErrNotRecovered: after the faults were healed, some key could not be
	// read within the recovery timeout.
	ErrNotRecovered = errors.New("drill: cluster did not recover")
	// ErrFault: the target failed to strike or heal a fault.
	ErrFault = errors.New("drill: fault")
)
