//go:build 386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm

package atomicmem

func toLE(v uint64) uint64   { return v }
func fromLE(v uint64) uint64 { return v }
