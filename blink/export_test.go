package blink

// GetCopied is Get through validated node copies instead of the in-place
// search (search.go, getCopied): the reference for tests and benchmarks.
func (t *Tree) GetCopied(key, dst []byte) ([]byte, error) {
	out, _, err := t.getCopied(key, dst)
	return out, err
}
