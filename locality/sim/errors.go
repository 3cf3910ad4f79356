package sim

import "errors"

// ErrInvalidParams: a parameter is out of range. It is wrapped with the
// field and value; test with errors.Is.
var ErrInvalidParams = errors.New("sim: invalid parameters")
