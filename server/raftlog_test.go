package server

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// The lines are raft's, as a healthy three-server start and a stop logged
// them (the expected ones), and as a lost leader and a dead peer log them
// (real trouble, which keeps raft's level).
func TestRaftLogLevel(t *testing.T) {
	for _, tc := range []struct {
		line  string
		raft  slog.Level
		level slog.Level
	}{
		// Expected in a healthy cluster.
		{`raft: heartbeat timeout reached, starting election: last-leader-addr= last-leader-id=`, slog.LevelWarn, slog.LevelInfo},
		{`raft: unable to get address for server, using fallback address: id=s3 fallback=127.0.0.1:7273 error="server: no member s3 in the region table"`, slog.LevelWarn, slog.LevelDebug},
		{`raft: failed to appendEntries to: peer="{Nonvoter s3 127.0.0.1:7273}" error="raftmux: region 3: dial 127.0.0.1:7273: raftmux: peer hosts no group for the region"`, slog.LevelError, slog.LevelInfo},
		{`raft: failed to heartbeat to: peer=127.0.0.1:7173 backoff time=10ms error="raftmux: region 1: dial 127.0.0.1:7173: raftmux: peer hosts no group for the region"`, slog.LevelError, slog.LevelInfo},
		{`raft: failed to get previous log: previous-index=9 last-index=0 error="log not found"`, slog.LevelWarn, slog.LevelInfo},
		{`raft: appendEntries rejected, sending older logs: peer="{Nonvoter s1 127.0.0.1:7073}" next=1`, slog.LevelWarn, slog.LevelInfo},
		{`raft: failed to take snapshot: error="cannot take snapshot now, wait until the configuration entry at 10 has been applied (have applied 6)"`, slog.LevelError, slog.LevelInfo},
		{`raft: failed to decode incoming command: error="read tcp 127.0.0.1:7273->127.0.0.1:51902: use of closed network connection"`, slog.LevelError, slog.LevelDebug},
		// Real trouble.
		{`raft: heartbeat timeout reached, starting election: last-leader-addr=127.0.0.1:7073 last-leader-id=s1`, slog.LevelWarn, slog.LevelWarn},
		{`raft: failed to appendEntries to: peer="{Voter s3 127.0.0.1:7273}" error=EOF`, slog.LevelError, slog.LevelError},
		{`raft: failed to heartbeat to: peer=127.0.0.1:7273 backoff time=10ms error="dial tcp 127.0.0.1:7273: connect: connection refused"`, slog.LevelError, slog.LevelError},
		{`raft: failed to take snapshot: error="failed to persist snapshot: no space left on device"`, slog.LevelError, slog.LevelError},
		{`raft: failed to decode incoming command: error="unknown rpc type 9"`, slog.LevelError, slog.LevelError},
		// Not lowered below raft's own level, nor raised.
		{`raft: entering follower state: follower="Node at 127.0.0.1:7073 [Follower]" leader-address= leader-id=`, slog.LevelInfo, slog.LevelInfo},
		{`raft: unable to get address for server, using fallback address: id=s3`, slog.LevelDebug, slog.LevelDebug},
	} {
		if got := raftLogLevel(tc.raft, tc.line); got != tc.level {
			t.Errorf("raftLogLevel(%v, %q) = %v, want %v", tc.raft, tc.line, got, tc.level)
		}
	}
}

// The writer raft logs through applies the rules: hclog's line in, the
// server's slog record at the rule's level out.
func TestRaftLogWriterLevels(t *testing.T) {
	var buf bytes.Buffer
	w := &raftLogWriter{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	for _, l := range []string{
		"[WARN]  raft: heartbeat timeout reached, starting election: last-leader-addr= last-leader-id=\n",
		"[ERROR] raft: failed to appendEntries to: peer=\"{Voter s3 127.0.0.1:7273}\" error=EOF\n",
	} {
		if _, err := w.Write([]byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "level=INFO") || !strings.Contains(lines[1], "level=ERROR") {
		t.Fatalf("logged:\n%s\nwant the first election at INFO, the failed call at ERROR", buf.String())
	}
}
