package keyrange

import (
	"testing"

	"github.com/magiconair/properties"
)

func TestFix(t *testing.T) {
	cases := []struct {
		props     string
		fixed     bool
		wantCount string
	}{
		{"recordcount=1000\nrequestdistribution=zipfian\n", true, "999"},
		{"recordcount=1000\ninsertstart=100\nrequestdistribution=zipfian\n", true, "899"},
		{"recordcount=1000\nrequestdistribution=zipfian\ninsertcount=500\n", false, "500"},
		{"recordcount=1000\nrequestdistribution=uniform\n", false, ""},
		{"recordcount=1000\nrequestdistribution=latest\n", false, ""},
		{"recordcount=1000\nrequestdistribution=zipfian\ndotransactions=false\n", false, ""},
	}
	for _, c := range cases {
		p := properties.MustLoadString(c.props)
		fixed, err := Fix(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.GetString("insertcount", ""); fixed != c.fixed || got != c.wantCount {
			t.Errorf("%q: fixed %v insertcount %q, want %v %q", c.props, fixed, got, c.fixed, c.wantCount)
		}
	}
}
