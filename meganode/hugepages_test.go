package meganode

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseMounts(t *testing.T) {
	data := `sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /dev/shm tmpfs rw,relatime,size=24684096k 0 0
hugetlbfs /dev/hugepages hugetlbfs rw,relatime,pagesize=2M 0 0
none /mnt/huge\0401G hugetlbfs rw,relatime,pagesize=1G 0 0
nodev /mnt/plain hugetlbfs rw,relatime 0 0
short line
`
	got := parseMounts([]byte(data))
	want := []hugetlbfsMount{
		{dir: "/dev/hugepages", pageSize: 2 << 20},
		{dir: "/mnt/huge 1G", pageSize: 1 << 30},
		{dir: "/mnt/plain"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestUnescapeMountPath(t *testing.T) {
	for in, want := range map[string]string{
		`/a/b`:          "/a/b",
		`/a\040b`:       "/a b",
		`/a\134b\011c`:  "/a\\b\tc",
		`/trailing\04`:  `/trailing\04`,
		`/not\999octal`: `/not\999octal`,
	} {
		if got := unescapeMountPath(in); got != want {
			t.Errorf("unescapeMountPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		err  bool
	}{
		{"2M", 2 << 20, false},
		{"1G", 1 << 30, false},
		{"2048k", 2 << 20, false},
		{"64KB", 64 << 10, false},
		{"4096", 4096, false},
		{"1t", 1 << 40, false},
		{"", 0, true},
		{"M", 0, true},
		{"0", 0, true},
		{"-1M", 0, true},
		{"99999999999999999999G", 0, true},
		{"16777216T", 0, true},
	} {
		got, err := parseSize(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestParseMeminfo(t *testing.T) {
	data := `MemTotal:       49368192 kB
AnonHugePages:         0 kB
HugePages_Total:      16
HugePages_Free:       10
HugePages_Rsvd:        3
HugePages_Surp:        0
Hugepagesize:       2048 kB
Hugetlb:           32768 kB
`
	got, err := parseMeminfo([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	want := meminfo{total: 16, free: 10, rsvd: 3, pageSize: 2 << 20}
	if got != want || got.available() != 7 {
		t.Fatalf("got %+v (available %d), want %+v", got, got.available(), want)
	}
	if got, err := parseMeminfo([]byte("MemTotal: 1 kB\n")); err != nil || got != (meminfo{}) {
		t.Fatalf("no huge page lines: %+v, %v", got, err)
	}
	if _, err := parseMeminfo([]byte("HugePages_Free: lots\n")); err == nil {
		t.Fatal("bad number accepted")
	}
	if m := (meminfo{free: 2, rsvd: 5}); m.available() != 0 {
		t.Fatal("reserved beyond free must leave 0 available")
	}
}

func TestHugeEnvPick(t *testing.T) {
	const twoM, oneG = 2 << 20, 1 << 30
	writable := func(dir string) bool { return dir != "/ro" }
	sysfs := func(ps uint64) (uint64, bool) {
		if ps == oneG {
			return 2, true
		}
		return 0, false
	}
	mi := meminfo{total: 8, free: 4, rsvd: 1, pageSize: twoM} // 3 available
	for _, tc := range []struct {
		name    string
		mounts  []hugetlbfsMount
		mi      meminfo
		dir     string
		size    uint64
		want    hugetlbfsMount
		wantErr string
	}{
		{name: "default size fits", mounts: []hugetlbfsMount{{dir: "/dev/hugepages"}}, mi: mi, size: 6 << 20,
			want: hugetlbfsMount{dir: "/dev/hugepages", pageSize: twoM}},
		{name: "rounds up to pages", mounts: []hugetlbfsMount{{dir: "/h"}}, mi: mi, size: 6<<20 + 1, wantErr: "3 free huge pages of 2048 KiB, need 4"},
		{name: "no mounts", mi: mi, size: twoM, wantErr: "no hugetlbfs mount"},
		{name: "no pages", mounts: []hugetlbfsMount{{dir: "/h"}}, mi: meminfo{pageSize: twoM}, size: twoM, wantErr: "0 free huge pages"},
		{name: "not writable, next one used", mounts: []hugetlbfsMount{{dir: "/ro"}, {dir: "/rw", pageSize: twoM}}, mi: mi, size: twoM,
			want: hugetlbfsMount{dir: "/rw", pageSize: twoM}},
		{name: "not writable", mounts: []hugetlbfsMount{{dir: "/ro"}}, mi: mi, size: twoM, wantErr: "not writable"},
		{name: "1G pages from sysfs", mounts: []hugetlbfsMount{{dir: "/g", pageSize: oneG}}, mi: mi, size: 3 << 29,
			want: hugetlbfsMount{dir: "/g", pageSize: oneG}},
		{name: "unknown page size counters", mounts: []hugetlbfsMount{{dir: "/x", pageSize: 16 << 20}}, mi: mi, size: twoM, wantErr: "no counters"},
		{name: "explicit dir", mounts: []hugetlbfsMount{{dir: "/a"}, {dir: "/b"}}, mi: mi, dir: "/b/", size: twoM,
			want: hugetlbfsMount{dir: "/b", pageSize: twoM}},
		{name: "explicit dir not mounted", mounts: []hugetlbfsMount{{dir: "/a"}}, mi: mi, dir: "/c", size: twoM, wantErr: "no hugetlbfs mounted at /c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := hugeEnv{mounts: tc.mounts, meminfo: tc.mi, avail: sysfs, writable: writable}
			got, err := env.pick(tc.dir, tc.size)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrNoHugepages) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrNoHugepages containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("pick = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestParseHugepageMode(t *testing.T) {
	for _, m := range []HugepageMode{HugepagesAuto, HugepagesOn, HugepagesOff} {
		got, err := ParseHugepageMode(strings.ToUpper(m.String()))
		if err != nil || got != m {
			t.Fatalf("ParseHugepageMode(%q) = %v, %v", m, got, err)
		}
	}
	if _, err := ParseHugepageMode("sometimes"); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("err = %v", err)
	}
	if s := HugepageMode(9).String(); s != "HugepageMode(9)" {
		t.Fatal(s)
	}
	for b, s := range map[Backing]string{BackingFile: "file", BackingShm: "shm", BackingHugetlbfs: "hugetlbfs", 0: "Backing(0)"} {
		if b.String() != s {
			t.Errorf("%d.String() = %q, want %q", b, b.String(), s)
		}
	}
}
