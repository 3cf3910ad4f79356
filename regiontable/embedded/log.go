package embedded

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// slogCore is a zapcore.Core that hands etcd's log records to a
// *slog.Logger, so that the process has one log format. Records at or
// above level pass; once quiet is set (etcd is being stopped on purpose)
// nothing passes, which drops the errors etcd logs about its own listeners
// closing.
type slogCore struct {
	log    *slog.Logger
	level  zapcore.Level
	quiet  *atomic.Bool
	fields []zapcore.Field
}

func newZapLogger(log *slog.Logger, level zapcore.Level, quiet *atomic.Bool) *zap.Logger {
	return zap.New(&slogCore{log: log.With(slog.String("component", "etcd")), level: level, quiet: quiet})
}

func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= c.level && !c.quiet.Load() }

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	nc := *c
	nc.fields = append(append([]zapcore.Field(nil), c.fields...), fields...)
	return &nc
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	keys := slices.Sorted(maps.Keys(enc.Fields))
	attrs := make([]slog.Attr, 0, len(keys))
	for _, k := range keys {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	c.log.LogAttrs(context.Background(), slogLevel(e.Level), e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	}
	return slog.LevelError
}
