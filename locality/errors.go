package locality

import "errors"

// Errors returned by the package. Test with errors.Is; they are wrapped with
// detail.
var (
	// ErrInvalidMode: a mode string or value is not one of adaptive, server,
	// client or ratio=P with 0 ≤ P ≤ 100.
	ErrInvalidMode = errors.New("locality: invalid mode")
	// ErrInvalidOptions: Options.Validate rejected a field.
	ErrInvalidOptions = errors.New("locality: invalid options")
)
