// Package amqpsink delivers tasks by publishing them to a RabbitMQ (AMQP
// 0-9-1) exchange with publisher confirms.
//
// # Delivery
//
// [Sink.Deliver] publishes the task's payload to the exchange and routing key
// of its [task.AMQPTarget] (routing key default: the task's app) with the
// mandatory flag set, and waits for the broker's confirm. It returns nil only
// after the broker acked the message; a nack, an unroutable message returned
// by the broker, a channel or connection closed before the confirm, or ctx
// ending first is an error, and the engine tries again with backoff. Delivery
// is therefore at least once: a message the broker stored but whose confirm
// was lost is published again, with the same MessageId (the task id) so that
// consumers can drop the duplicate.
//
// The message is persistent, carries the task id as MessageId, the publish
// time as Timestamp, Content-Type application/json when the payload is valid
// JSON (else application/octet-stream), and the headers [HeaderTaskID],
// [HeaderApp], [HeaderKey] (when the task has a key), [HeaderAttempt] (an
// integer), [HeaderDueAt] (RFC 3339, UTC) and [HeaderScheduleID] (when the
// task is an occurrence of a schedule).
//
// # Connections and channels
//
// A Sink keeps one connection per broker URL, dialled by the first Deliver
// that needs it, and a pool of confirm-mode channels on each. A channel
// carries one publish at a time, so the return and the confirm it sees belong
// to that publish; at most [Config.MaxChannels] publishes are in flight per
// connection, and further Delivers wait for a channel (or for ctx). A
// connection the broker or the network dropped is dialled again by the next
// Deliver; no goroutine of the Sink runs between Delivers.
//
// Library calls that take no context (a socket write, opening a channel, the
// connection handshake) are made to honour ctx by closing the connection's
// socket when ctx ends during one. That fails the other publishes in flight
// on the connection too, which is what a broker that stopped reading (a
// resource alarm) leaves them with anyway.
//
// # Brokers the operator did not allow
//
// A target's url may be a broker name or a URL. With [Config.Resolve] set,
// the Sink asks it for the broker URL a url stands for and whether the
// operator allowed the task's app that broker; [Config.DefaultURL] is always
// allowed. A connection to a broker that is not allowed goes through the
// app's [netguard.Policy] from [Config.Guard]: the address the socket
// connects to is checked at connect time, so a loopback or private address
// is refused with a [*netguard.BlockedError] before anything is sent. Such
// connections are kept apart from allowed ones and from other policies'.
//
// # Limits
//
// The broker's URL, with credentials, is kept in the task's target or in
// [Config.DefaultURL]; error messages show it with the password redacted.
// TLS (amqps://) is configured by the URL alone: the system roots, or the
// certificates named by its cacertfile, certfile and keyfile parameters.
// Queues, exchanges and bindings are the broker operator's: the Sink declares
// nothing.
package amqpsink
