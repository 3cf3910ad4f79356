// Package doccheck holds the tests that keep the repository's documents
// true to its code. It has no code of its own; its tests read the tree
// from the module's root:
//
//   - design_test.go: every citation of a section of docs/design.md
//     ("docs/design.md §9", "[design.md](design.md) §4, §9") in a .go or
//     .md file names a section the document has ("## 9. ..."), the
//     sections are numbered 1, 2, 3 ... in order, and nothing still cites
//     a DESIGN document outside the tree.
//   - architecture_test.go: the package tables of docs/architecture.md
//     name every package `go list ./...` reports, each once, and nothing
//     else; its fenced "imports" block gives each package's imports among
//     the module's packages exactly as `go list -json ./...` reports them
//     (test files aside), every package above the packages it imports.
//
// Each check is a function from the documents (and the import graph) to
// a list of problems, which unit tests run on small documents that are
// wrong on purpose, so that every check is seen to fail.
package doccheck
