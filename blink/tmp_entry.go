package blink

type entryRef struct{ key, payload []byte }
