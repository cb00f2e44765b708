package attach

import "errors"

// ErrInvalid marks an input that retrying cannot fix.
var ErrInvalid = errors.New("invalid attachment")
