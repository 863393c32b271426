// Package natssink delivers tasks by publishing them to a NATS JetStream
// subject.
//
// # Delivery
//
// [Sink.Deliver] publishes the task's payload to the subject of its
// [task.NATSTarget] with JetStream and returns nil once a stream acked it
// (a PubAck). The message carries the header Nats-Msg-Id set to the task id,
// so a task published again (its confirm was lost, or an attempt timed out
// after the stream stored it) within the stream's duplicate window (2
// minutes by default) is stored once. A subject that no stream captures
// ("no responders"), a stream error, a lost connection or ctx ending first is
// an error, and the engine tries again with backoff.
//
// The message carries the headers [HeaderTaskID], [HeaderApp], [HeaderKey]
// (when the task has a key), [HeaderAttempt], [HeaderDueAt] (RFC 3339,
// UTC) and [HeaderScheduleID] (when the task is an occurrence of a
// schedule), as httpsink does.
//
// # Connections
//
// A Sink keeps one connection per server URL, made by the first Deliver that
// needs it, and shares it between Delivers. The nats.go client reconnects it
// for ever ([ReconnectWait] apart); while it is reconnecting, Deliver fails
// at once instead of buffering the message, so no publish is sent after its
// Deliver gave up. Close closes the connections.
//
// # Brokers the operator did not allow
//
// A target's url may be a broker name or a URL. With [Config.Resolve] set,
// the Sink asks it for the server URL a url stands for and whether the
// operator allowed the task's app that server; [Config.DefaultURL] is always
// allowed. A connection to a server that is not allowed goes through the
// app's [netguard.Policy] from [Config.Guard]: the address the socket
// connects to is checked at connect time, so a loopback or private address
// is refused with a [*netguard.BlockedError] before anything is sent. Such
// connections are kept apart from allowed ones and from other policies'.
//
// # Limits
//
// The Sink creates no stream: the operator creates the streams that capture
// the targets' subjects. Error messages show server URLs with the password
// redacted.
package natssink
