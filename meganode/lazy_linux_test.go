package meganode

import "testing"

// TestCreateIsLazy: a new region takes memory (tmpfs) or disk (a plain
// file) as its pages are written, not its whole size up front; Prefault
// commits it all at Create.
func TestCreateIsLazy(t *testing.T) {
	const size = 256 << 20
	for _, backing := range []string{"file", "shm"} {
		for _, prefault := range []bool{false, true} {
			name := backing
			if prefault {
				name += "/prefault"
			}
			t.Run(name, func(t *testing.T) {
				opts := imageOptions(t, backing)
				opts.Size, opts.MeganodeSize, opts.Meganodes = size, 16<<20, 0
				opts.Prefault = prefault
				r := mustCreateBacking(t, opts, backing)
				blocks := fileBlocks(t, r)
				rss := mappingRss(t, r)
				t.Logf("%v: file blocks %d KiB, mapping resident %d KiB", r, blocks>>10, rss>>10)
				switch {
				case prefault && blocks < size:
					t.Errorf("prefaulted region file has %d bytes of blocks, want %d", blocks, size)
				case !prefault && (blocks > size/16 || rss > size/16):
					t.Errorf("new region file has %d bytes of blocks and %d resident of %d: not lazy", blocks, rss, size)
				}
			})
		}
	}
}
