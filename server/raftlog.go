package server

import (
	"log/slog"
	"strings"

	"github.com/cellstore/cell/internal/raftmux"
)

// hashicorp/raft logs at WARN and ERROR much of what is expected in a
// healthy cluster: every group's first election, a new replica whose log
// is empty, a learner that has not opened its group yet when its leader
// first calls, a shutdown snapshot refused because only configuration
// entries followed the last command. An operator who sees WARN and ERROR
// lines at every start learns to ignore them, and then misses the real
// ones. raftLogLevel lowers the level of those expected lines, each
// recognised by its message (and the detail that makes it expected);
// everything else keeps raft's level.

// raftLogRule lowers the lines whose message starts with prefix, contains
// every string of detail and ends with suffix to level.
type raftLogRule struct {
	prefix string
	detail []string
	suffix string
	level  slog.Level
}

var raftLogRules = []raftLogRule{
	// A group's first election: nobody led it before (a new group, or a
	// restart). A lost leader names itself in last-leader-id and stays
	// WARN.
	{prefix: "raft: heartbeat timeout reached, starting election", suffix: "last-leader-id=", level: slog.LevelInfo},
	// The region table has no member entry for a peer yet (it is
	// starting) or any more (its lease lapsed): raft uses the address in
	// the group's configuration, which is right unless the peer moved.
	{prefix: "raft: unable to get address for server, using fallback address", level: slog.LevelDebug},
	// A replica being added opens its group once it sees the region
	// table list it; the leader's first calls may come before that.
	{prefix: "raft: failed to appendEntries to", detail: []string{raftmux.ErrUnknownRegion.Error()}, level: slog.LevelInfo},
	{prefix: "raft: failed to heartbeat to", detail: []string{raftmux.ErrUnknownRegion.Error()}, level: slog.LevelInfo},
	{prefix: "raft: failed to install snapshot", detail: []string{raftmux.ErrUnknownRegion.Error()}, level: slog.LevelInfo},
	// A follower behind its leader's log (a new replica, a restarted
	// one): the leader goes back to older entries or a snapshot, as raft
	// does.
	{prefix: "raft: failed to get previous log", detail: []string{`error="log not found"`}, level: slog.LevelInfo},
	{prefix: "raft: appendEntries rejected, sending older logs", level: slog.LevelInfo},
	// raft refuses a snapshot while its newest configuration entry is
	// past the last command applied (a group whose replicas were just
	// added, and nothing written since); the log stays, and the next
	// snapshot or start covers it.
	{prefix: "raft: failed to take snapshot", detail: []string{"cannot take snapshot now"}, level: slog.LevelInfo},
	// The server closed the raft listener itself: it is stopping.
	{prefix: "raft: failed to decode incoming command", detail: []string{"use of closed network connection"}, level: slog.LevelDebug},
}

// raftLogLevel is the level a raft log line (its message, with raft's
// key=value pairs) is logged at, raft's own level being level.
func raftLogLevel(level slog.Level, line string) slog.Level {
	if level < slog.LevelWarn {
		return level
	}
	for _, r := range raftLogRules {
		if r.level >= level || !strings.HasPrefix(line, r.prefix) {
			continue
		}
		matched := strings.HasSuffix(line, r.suffix)
		for _, d := range r.detail {
			matched = matched && strings.Contains(line, d)
		}
		if matched {
			return r.level
		}
	}
	return level
}
