package sim

import (
	"testing"

	"github.com/cellstore/cell/locality"
)

func mustMode(t testing.TB, s string) locality.Mode {
	t.Helper()
	m, err := locality.ParseMode(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
