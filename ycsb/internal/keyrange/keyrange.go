// Package keyrange works around an off-by-one of go-ycsb v1.0.3's core
// workload: with requestdistribution=zipfian it draws keys from
// [insertstart, insertstart+insertcount+expectednewkeys], both ends
// included, so that one key past the loaded ones is read and updated now
// and then (a read of a record that is not there: an error in every
// store). Java YCSB uses the same bounds but draws again while the key is
// past the last one inserted (CoreWorkload.nextKeynum); go-ycsb does not.
// Fix gives go-ycsb an insertcount one smaller in the run phase, which
// makes the range end at the last loaded key (plus the expected inserts,
// as Java's). insertcount has no other use in the run phase.
package keyrange

import (
	"strconv"

	"github.com/magiconair/properties"
	"github.com/pingcap/go-ycsb/pkg/prop"
)

// Fix lowers insertcount by one for a zipfian run phase whose insertcount
// was not given, and reports whether it did.
func Fix(p *properties.Properties) (bool, error) {
	if !p.GetBool(prop.DoTransactions, true) ||
		p.GetString(prop.RequestDistribution, prop.RequestDistributionDefault) != "zipfian" {
		return false, nil
	}
	if _, given := p.Get(prop.InsertCount); given {
		return false, nil
	}
	n := p.GetInt64(prop.RecordCount, prop.RecordCountDefault) - p.GetInt64(prop.InsertStart, prop.InsertStartDefault) - 1
	if n < 1 {
		return false, nil
	}
	_, _, err := p.Set(prop.InsertCount, strconv.FormatInt(n, 10))
	return err == nil, err
}
