// The franz-go client (github.com/twmb/franz-go v1.22.3: kgo, with kadm
// v1.20.0 for admin and kmsg v1.15.1 for hand-made requests), driven from the
// Rust integration tests like the Python scripts, JavaClient.java,
// kafkajs/client.js and sarama/main.go beside it: the same flags and the same
// JSON shapes (see ../README.md), one JSON object (sorted keys, Python's
// separators) on the last stdout line; exit 0 done, 1 fell short (JSON still
// printed), 2 bad arguments, 3 crash (stack on stderr).
//
//	BINARY produce --bootstrap B --topic T --count N [--start S]
//	    [--compression none|gzip|snappy|lz4|zstd] [--acks 0|1|all]
//	    [--idempotent | --no-idempotent] [--keyed] [--partition P]
//	    [--value-size N] [--value-prefix P] [--linger-ms MS] [--timeout S]
//	BINARY consume --bootstrap B --topic T --expect N
//	    (--group G [--members M] [--commit] | --assign)
//	    [--linger S] [--records] [--timeout S]
//	BINARY admin --bootstrap B create|describe|delete|offsets
//	    [--topic T] [--partitions P] [--replication-factor R]
//	    [--config k=v ...] [--timeout S] [--allow-error]
//	BINARY version      (franz-go, kmsg, kadm and Go versions, one line)
//
// Every command also takes -X key=value (repeatable):
//
//	log=true|info|debug|warn|error   franz-go's logger on stderr (true = info;
//	                        also FRANZ_LOG=1)
//	client.id=ID            kgo.ClientID (default franz_produce, franz_consume-N, ...)
//	max.version=V           kgo.MaxVersions(kversion.FromString(V)): the newest
//	                        Kafka release whose request versions franz-go may
//	                        use, e.g. 2.8 or 3.0 (default: franz-go's own,
//	                        Kafka 4.x; franz-go still asks ApiVersions and
//	                        takes the lower of both)
//	metadata.min.age.ms=MS  kgo.MetadataMinAge (default 250 ms; franz-go's is 5 s)
//	allow.auto.create.topics=BOOL   kgo.AllowAutoTopicCreation (default false)
//	partitioner=sticky|uniform|roundrobin|leastbackup   (produce)
//	max.inflight=N          kgo.MaxProduceRequestsInflightPerBroker (produce)
//	balance=cooperative-sticky|sticky|range|roundrobin  (consume, group balancer)
//	group.protocol=classic|consumer   (consume; consumer = KIP-848 through
//	                        kgo.ServerSideBalancer: the broker assigns)
//	session.timeout.ms / heartbeat.interval.ms / rebalance.timeout.ms /
//	fetch.max.wait.ms       (consume)
//	fetch.sessions=BOOL     false: kgo.DisableFetchSessions (KIP-227; default true)
//	tls.ca=FILE             connect with TLS, trusting the PEM authorities of FILE
//	tls.cert=FILE, tls.key=FILE   a client certificate for mTLS (with tls.ca)
//	sasl.mechanism=PLAIN|SCRAM-SHA-256|SCRAM-SHA-512, sasl.username=U,
//	sasl.password=P         log in with SASL (franz-go's sasl/plain, sasl/scram)
//
// Build (module mode; go.mod and go.sum beside this file pin the modules;
// the module cache, build cache and sumdb notes kept out of $HOME, in the
// git-ignored .peers), from the repository root:
//
//	export GOPATH=$PWD/.peers/go GOMODCACHE=$PWD/.peers/go/mod \
//	  GOCACHE=$PWD/.peers/go/cache GOFLAGS="-modcacherw -buildvcs=false"
//	(cd tests/clients/franz && go mod download && go build -o OUT .)
//
// franz-go 1.22 needs Go 1.26 (go.mod says go 1.26.0). It is pure Go: the
// codecs are klauspost/compress (gzip, snappy, zstd) and pierrec/lz4, no cgo.
//
// Protocol: unlike sarama, franz-go sends ApiVersions on every connection
// (v5 first; a broker that knows only v4, as Kafka 4.1, answers
// UNSUPPORTED_VERSION and franz-go asks again with v4) and uses the newest
// version both sides know. Against Kafka 4.1.1: Produce v13 (topics by ID),
// Fetch v18 (topics by ID, fetch sessions), Metadata v13, ListOffsets v10,
// FindCoordinator v6, JoinGroup v9, SyncGroup v5, LeaveGroup v5,
// OffsetCommit v9, OffsetFetch v9, InitProducerId v5, CreateTopics v7,
// DeleteTopics v6, DescribeConfigs v4, ConsumerGroupHeartbeat v1 (KIP-848).
// -X max.version caps them.
//
// How it differs from the librdkafka scripts, because franz-go works so:
//   - produce: kgo.Client.Produce with a promise per record, then Flush; each
//     promise gives the record's partition and offset (acks=0: franz-go
//     reports the record done once written, with a made-up offset; it is left
//     out of "offsets"). Keyed records: kgo.StickyKeyPartitioner(nil), murmur2
//     as Java's (the same partitions as Java, kafka-python and kafkajs, and as
//     librdkafka with partitioner=murmur2_random; NOT as ck_produce.py, whose
//     librdkafka default consistent_random hashes with CRC32); unkeyed records
//     stick to one partition per batch (as Java's and librdkafka's sticky
//     partitioning), not round robin. -X partitioner=uniform is franz-go's own
//     default (UniformBytesPartitioner: murmur2 for keys, adaptive sticky for
//     the rest), roundrobin ignores keys. --partition P: ManualPartitioner.
//     Idempotence: franz-go is idempotent unless kgo.DisableIdempotentWrite,
//     which it requires for acks 0 and 1. So: --no-idempotent disables it;
//     --idempotent with --acks 0|1 exits 2; neither flag: idempotent at
//     acks=all, not otherwise (Java's default). --linger-ms sets
//     kgo.ProducerLinger (default 5 ms, 0 = none). --timeout sets
//     kgo.RecordDeliveryTimeout; Flush waits at most --timeout + 5 s, and
//     records still pending then count as "undelivered".
//     Compression: franz-go sends a batch compressed only when that makes it
//     smaller (hard-wired, even with a custom Compressor): a batch of one
//     short record ("gzip-0") goes out uncompressed; pad with --value-size
//     (e.g. 100) to make every batch compressible. zstd needs Produce v7:
//     franz-go silently sends uncompressed batches when the negotiated
//     version is older (a broker older than 2.1); with -X max.version below
//     2.1 this client refuses zstd (exit 2) instead.
//     acks=0: a broker that is not yet the leader of a partition (a topic
//     created a moment ago) drops that partition's records and closes the
//     connection; franz-go has already reported them delivered.
//   - consume: each member is its own kgo.Client in the group (default
//     balancer: franz-go's cooperative-sticky, i.e. incremental cooperative
//     rebalancing, KIP-429; Java/librdkafka default to eager range), from the
//     earliest offset, autocommit disabled, kgo.BlockRebalanceOnPoll so that
//     the rebalance callbacks run between polls, never while a polled batch
//     is being counted. With --commit each member commits the offsets past the
//     records it counted (kgo.CommitOffsetsSync, with the records' leader
//     epochs) in OnPartitionsRevoked (every rebalance that takes partitions
//     away, and a session's end) and once at the end, before any member
//     leaves; lost partitions (OnPartitionsLost) are dropped uncommitted.
//     Without --commit nothing is committed. Records a poll returns after the
//     run is done are neither counted nor committed. --assign: no group, one
//     client with kgo.ConsumePartitions at the log start of every partition
//     (after a Metadata request; a missing topic is an error).
//     --expect 0 counts as reached at the start (then --linger applies).
//     "committed" comes from an OffsetFetch for the group (kadm.FetchOffsets,
//     a fresh client) after the members stopped and before they leave.
//     Defaults unlike franz-go's: session timeout 10 s, heartbeat 1 s,
//     rebalance timeout 20 s, fetch max wait 500 ms (franz-go: 45 s, 3 s,
//     60 s, 5 s). franz-go's metadata requests never ask the broker to
//     auto-create a topic (unless -X allow.auto.create.topics=true).
//     -X group.protocol=consumer joins with KIP-848 (ConsumerGroupHeartbeat;
//     balancer cooperative-sticky/sticky -> server assignor "uniform", range ->
//     "range"; roundrobin is refused). franz-go silently falls back to the
//     classic protocol when the broker lacks ConsumerGroupHeartbeat v1 (see
//     -X log=true). Under KIP-848 the broker sets the session timeout and the
//     heartbeat interval (Kafka: group.consumer.session.timeout.ms 45 s,
//     group.consumer.heartbeat.interval.ms 5 s), so the -X ones do not apply
//     and a partition moves to a new member only after up to two heartbeats
//     (the owner's revocation, then the newcomer's assignment): ~10 s.
//   - admin: kadm for create (CreateTopics; --timeout is the request's
//     timeout), delete (DeleteTopics) and offsets (ListOffsets earliest and
//     latest, after the same Metadata check as describe); describe sends its
//     own Metadata request (AllowAutoTopicCreation=false: it never creates the
//     topic) and kadm.DescribeTopicConfigs. Errors read "KAFKA_ERROR_NAME:
//     message" (the broker's message when it sent one, else franz-go's
//     description of the code); client-side franz-go errors read
//     "FRANZ_...: message".
//   - A panic in one of franz-go's own goroutines (not in this file's code or
//     callbacks) ends the process with Go's exit status 2, not 3; the stack
//     is on stderr.
package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

var t0 = time.Now()

func elapsed() float64 { return math.Round(time.Since(t0).Seconds()*1000) / 1000 }

// --- arguments -------------------------------------------------------------------

type usageError string

func usage(format string, a ...interface{}) { panic(usageError(fmt.Sprintf(format, a...))) }

const usageText = `usage:
  BINARY produce --bootstrap B --topic T --count N [--start S]
      [--compression none|gzip|snappy|lz4|zstd] [--acks 0|1|all]
      [--idempotent | --no-idempotent] [--keyed] [--partition P]
      [--value-size N] [--value-prefix P] [--linger-ms MS] [--timeout S]
  BINARY consume --bootstrap B --topic T --expect N
      (--group G [--members M] [--commit] | --assign)
      [--linger S] [--records] [--timeout S]
  BINARY admin --bootstrap B create|describe|delete|offsets
      [--topic T] [--partitions P] [--replication-factor R]
      [--config k=v ...] [--timeout S] [--allow-error]
  BINARY version
  every command: -X key=value (see the source header)`

var flagNames = map[string][]string{
	"produce": {"--idempotent", "--no-idempotent", "--keyed"},
	"consume": {"--assign", "--commit", "--records"},
	"admin":   {"--allow-error"},
}

var valueNames = map[string][]string{
	"produce": {"--bootstrap", "--topic", "--count", "--start", "--compression", "--acks", "--partition",
		"--value-size", "--value-prefix", "--linger-ms", "--timeout"},
	"consume": {"--bootstrap", "--topic", "--group", "--expect", "--timeout", "--members", "--linger"},
	"admin":   {"--bootstrap", "--topic", "--partitions", "--replication-factor", "--timeout"},
}

var repeatedNames = map[string][]string{"admin": {"--config"}}

type args struct {
	values     map[string]string
	flags      map[string]bool
	repeated   map[string][]string
	positional []string
	extra      map[string]string
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func parseArgs(command string, argv []string) *args {
	a := &args{values: map[string]string{}, flags: map[string]bool{}, repeated: map[string][]string{}, extra: map[string]string{}}
	for i := 0; i < len(argv); i++ {
		name := argv[i]
		inline, hasInline := "", false
		if strings.HasPrefix(name, "--") && strings.Contains(name, "=") {
			eq := strings.Index(name, "=")
			inline, hasInline = name[eq+1:], true
			name = name[:eq]
		}
		next := func() string {
			if hasInline {
				return inline
			}
			if i+1 >= len(argv) {
				usage("%s needs a value", name)
			}
			i++
			return argv[i]
		}
		switch {
		case name == "-h" || name == "--help":
			fmt.Println(usageText)
			os.Exit(0)
		case name == "-X":
			a.addExtra(next())
		case strings.HasPrefix(name, "-X") && len(name) > 2:
			a.addExtra(name[2:])
		case contains(flagNames[command], name):
			if hasInline {
				usage("%s takes no value", name)
			}
			a.flags[name] = true
		case contains(valueNames[command], name):
			a.values[name] = next()
		case contains(repeatedNames[command], name):
			a.repeated[name] = append(a.repeated[name], next())
		case strings.HasPrefix(name, "-") && name != "-":
			usage("unknown option %s for %s", name, command)
		default:
			a.positional = append(a.positional, name)
		}
	}
	return a
}

var extraKeys = []string{"log", "client.id", "max.version", "metadata.min.age.ms", "allow.auto.create.topics",
	"partitioner", "max.inflight", "balance", "group.protocol", "session.timeout.ms", "heartbeat.interval.ms",
	"rebalance.timeout.ms", "fetch.max.wait.ms", "fetch.sessions", "tls.ca", "tls.cert", "tls.key",
	"sasl.mechanism", "sasl.username", "sasl.password"}

func (a *args) addExtra(kv string) {
	eq := strings.Index(kv, "=")
	if eq < 0 {
		usage("bad -X option %s: expected key=value", kv)
	}
	if !contains(extraKeys, kv[:eq]) {
		usage("unknown -X option %s (known: %s)", kv[:eq], strings.Join(extraKeys, ", "))
	}
	a.extra[kv[:eq]] = kv[eq+1:]
}

func (a *args) get(name string, dflt *string) string {
	v, ok := a.values[name]
	if !ok {
		if dflt == nil {
			usage("%s is required", name)
		}
		return *dflt
	}
	return v
}

func str(s string) *string { return &s }

func (a *args) has(flag string) bool { return a.flags[flag] }

func (a *args) int(name string, dflt *int64) int64 {
	v, ok := a.values[name]
	if !ok {
		if dflt == nil {
			usage("%s is required", name)
		}
		return *dflt
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		usage("%s: not an integer: %s", name, v)
	}
	return n
}

func i64(n int64) *int64 { return &n }

func (a *args) secs(name string, dflt float64) float64 {
	v, ok := a.values[name]
	if !ok {
		return dflt
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		usage("%s: not a number: %s", name, v)
	}
	return f
}

func (a *args) choice(name, dflt string, choices []string) string {
	v := a.get(name, &dflt)
	if !contains(choices, v) {
		usage("%s: '%s' is not one of %s", name, v, strings.Join(choices, ", "))
	}
	return v
}

func (a *args) extraInt(key string, dflt int64) int64 {
	v, ok := a.extra[key]
	if !ok {
		return dflt
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		usage("-X %s: not an integer: %s", key, v)
	}
	return n
}

func (a *args) extraMs(key string, dflt time.Duration) time.Duration {
	return time.Duration(a.extraInt(key, int64(dflt/time.Millisecond))) * time.Millisecond
}

func (a *args) extraBool(key string, dflt bool) bool {
	v, ok := a.extra[key]
	if !ok {
		return dflt
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		usage("-X %s: not a boolean: %s", key, v)
	}
	return b
}

func (a *args) bootstrap() []string {
	var out []string
	for _, s := range strings.Split(a.get("--bootstrap", nil), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		usage("--bootstrap is empty")
	}
	return out
}

// --- JSON output -------------------------------------------------------------------

// pyjson writes v like Python's json.dumps(sort_keys=True): sorted keys,
// ", " and ": " separators, non-ASCII escaped.
func pyjson(b *strings.Builder, v interface{}) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int:
		b.WriteString(strconv.FormatInt(int64(x), 10))
	case int32:
		b.WriteString(strconv.FormatInt(int64(x), 10))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			b.WriteString("null")
			return
		}
		s := strconv.FormatFloat(x, 'f', -1, 64)
		if !strings.ContainsAny(s, ".e") {
			s += ".0"
		}
		b.WriteString(s)
	case string:
		b.WriteByte('"')
		for _, r := range x {
			switch {
			case r == '"':
				b.WriteString(`\"`)
			case r == '\\':
				b.WriteString(`\\`)
			case r == '\n':
				b.WriteString(`\n`)
			case r == '\r':
				b.WriteString(`\r`)
			case r == '\t':
				b.WriteString(`\t`)
			case r < 0x20 || (r >= 0x7f && r < 0x10000):
				fmt.Fprintf(b, `\u%04x`, r)
			case r >= 0x10000:
				r -= 0x10000
				fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			default:
				b.WriteRune(r)
			}
		}
		b.WriteByte('"')
	case []interface{}:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			pyjson(b, e)
		}
		b.WriteByte(']')
	case []string:
		l := make([]interface{}, len(x))
		for i, e := range x {
			l[i] = e
		}
		pyjson(b, l)
	case []int32:
		l := make([]interface{}, len(x))
		for i, e := range x {
			l[i] = e
		}
		pyjson(b, l)
	case map[string]interface{}:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			pyjson(b, k)
			b.WriteString(": ")
			pyjson(b, x[k])
		}
		b.WriteByte('}')
	default:
		// Anything else through encoding/json (numbers of other widths, ...).
		raw, err := json.Marshal(x)
		if err != nil {
			pyjson(b, fmt.Sprint(x))
			return
		}
		b.Write(raw)
	}
}

// emit prints the result as the last stdout line and exits (0 if ok, else 1).
func emit(result map[string]interface{}, ok bool, message string) {
	if message != "" {
		fmt.Fprintln(os.Stderr, message)
	}
	var b strings.Builder
	pyjson(&b, result)
	b.WriteByte('\n')
	os.Stdout.WriteString(b.String())
	if ok {
		os.Exit(0)
	}
	os.Exit(1)
}

// --- shared helpers ------------------------------------------------------------------

func valueFor(prefix string, i int64, size int64) string {
	v := fmt.Sprintf("%s-%d", prefix, i)
	if size > 0 && int64(len(v)) < size {
		v += strings.Repeat(".", int(size)-len(v))
	}
	return v
}

// valuesSha is the sha256 over the sorted, de-duplicated values joined by
// newlines (byte order of UTF-8 = Python's code point order).
func valuesSha(values []string) string {
	set := map[string]bool{}
	for _, v := range values {
		set[v] = true
	}
	sorted := make([]string, 0, len(set))
	for v := range set {
		sorted = append(sorted, v)
	}
	sort.Strings(sorted)
	sum := sha256.Sum256([]byte(strings.Join(sorted, "\n")))
	return hex.EncodeToString(sum[:])
}

func topErrors(errs []string) []interface{} {
	set := map[string]bool{}
	for _, e := range errs {
		set[e] = true
	}
	sorted := make([]string, 0, len(set))
	for e := range set {
		sorted = append(sorted, e)
	}
	sort.Strings(sorted)
	if len(sorted) > 20 {
		sorted = sorted[:20]
	}
	out := make([]interface{}, len(sorted))
	for i, e := range sorted {
		out[i] = e
	}
	return out
}

func addOffset(offsets map[string]interface{}, partition int32, offset int64) {
	k := strconv.Itoa(int(partition))
	if cur, ok := offsets[k].([]interface{}); ok {
		lo, hi := cur[0].(int64), cur[1].(int64)
		if offset < lo {
			lo = offset
		}
		if offset > hi {
			hi = offset
		}
		offsets[k] = []interface{}{lo, hi}
	} else {
		offsets[k] = []interface{}{offset, offset}
	}
}

func incr(m map[string]interface{}, partition int32) {
	k := strconv.Itoa(int(partition))
	n, _ := m[k].(int64)
	m[k] = n + 1
}

// withTimeout runs f and waits at most d for it; false if it did not finish.
func withTimeout(d time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() {
		defer crashOnPanic()
		f()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func crashOnPanic() {
	if r := recover(); r != nil {
		crash(r)
	}
}

func crash(r interface{}) {
	fmt.Fprintf(os.Stderr, "franz client: crashed: %v\n%s", r, debug.Stack())
	os.Exit(3)
}

func secsDuration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// --- errors ------------------------------------------------------------------------------

// kerrText is "NAME: message" for a Kafka error code: the broker's message
// when it sent one, else franz-go's description of the code.
func kerrText(code int16, brokerMsg *string) string {
	e := kerr.ErrorForCode(code)
	if e == nil {
		return "NONE"
	}
	return errText(withBrokerMsg(e, brokerMsg))
}

// withBrokerMsg attaches a broker's error message to a Kafka error.
func withBrokerMsg(err error, msg *string) error {
	if err == nil || msg == nil || *msg == "" {
		return err
	}
	return &brokerError{err, *msg}
}

type brokerError struct {
	err error
	msg string
}

func (e *brokerError) Error() string { return e.err.Error() + ": " + e.msg }
func (e *brokerError) Unwrap() error { return e.err }

var franzErrorNames = []struct {
	err  error
	name string
}{
	{kgo.ErrRecordTimeout, "FRANZ_RECORD_TIMEOUT"},
	{kgo.ErrRecordRetries, "FRANZ_RECORD_RETRIES"},
	{kgo.ErrMaxBuffered, "FRANZ_MAX_BUFFERED"},
	{kgo.ErrAborting, "FRANZ_ABORTING"},
	{kgo.ErrClientClosed, "FRANZ_CLIENT_CLOSED"},
	{kgo.ErrMaxDecompress, "FRANZ_DECOMPRESS_TOO_LARGE"},
}

// errText is "NAME: message": Kafka's error name for broker errors, a
// FRANZ_... name for errors of the client itself.
func errText(err error) string {
	if err == nil {
		return "NONE"
	}
	for _, n := range franzErrorNames {
		if errors.Is(err, n.err) {
			return n.name + ": " + err.Error()
		}
	}
	var be *brokerError
	if errors.As(err, &be) {
		var ke *kerr.Error
		if errors.As(be.err, &ke) {
			return ke.Message + ": " + be.msg
		}
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		if err == error(ke) {
			return ke.Message + ": " + ke.Description
		}
		s := err.Error()
		if strings.HasPrefix(s, ke.Message+": ") {
			return s
		}
		return ke.Message + ": " + s
	}
	var eof *kgo.ErrFirstReadEOF
	if errors.As(err, &eof) {
		return "FRANZ_FIRST_READ_EOF: " + err.Error()
	}
	var dl *kgo.ErrDataLoss
	if errors.As(err, &dl) {
		return "FRANZ_DATA_LOSS: " + err.Error()
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "FRANZ_TIMEOUT: " + err.Error()
	case errors.Is(err, context.Canceled):
		return "FRANZ_CANCELED: " + err.Error()
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		// The broker closed the connection (e.g. on a request version it
		// does not accept).
		return "FRANZ_CONNECTION_CLOSED: " + err.Error() + " (the broker closed the connection)"
	}
	var ne net.Error
	if errors.As(err, &ne) {
		if ne.Timeout() {
			return "FRANZ_NETWORK_TIMEOUT: " + err.Error()
		}
		return "FRANZ_NETWORK_ERROR: " + err.Error()
	}
	return "FRANZ_ERROR: " + err.Error()
}

// --- configuration ----------------------------------------------------------------------

// commonOpts: bootstrap, client id, logger, version cap, metadata age.
func commonOpts(a *args, clientID string) []kgo.Opt {
	if x, ok := a.extra["client.id"]; ok {
		clientID = x
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(a.bootstrap()...),
		kgo.ClientID(clientID),
		kgo.MetadataMinAge(a.extraMs("metadata.min.age.ms", 250*time.Millisecond)),
	}
	if lv := logLevel(a); lv != kgo.LogLevelNone {
		prefix := "[franz " + clientID + "] "
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, lv, func() string {
			return time.Now().Format("15:04:05.000000 ") + prefix
		})))
	}
	if v, ok := a.extra["max.version"]; ok {
		vs := kversion.FromString(v)
		if vs == nil {
			usage("-X max.version=%s: not a Kafka version (e.g. 2.8, 3.0, 4.0)", v)
		}
		opts = append(opts, kgo.MaxVersions(vs))
	}
	if a.extraBool("allow.auto.create.topics", false) {
		opts = append(opts, kgo.AllowAutoTopicCreation())
	}
	return append(opts, securityOpts(a)...)
}

// securityOpts: TLS (tls.ca, tls.cert, tls.key) and SASL (sasl.*) options.
func securityOpts(a *args) []kgo.Opt {
	var opts []kgo.Opt
	if ca, ok := a.extra["tls.ca"]; ok {
		pem, err := os.ReadFile(ca)
		if err != nil {
			usage("-X tls.ca=%s: %v", ca, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			usage("-X tls.ca=%s: no PEM certificate", ca)
		}
		config := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		if cert, ok := a.extra["tls.cert"]; ok {
			pair, err := tls.LoadX509KeyPair(cert, a.extra["tls.key"])
			if err != nil {
				usage("-X tls.cert/tls.key: %v", err)
			}
			config.Certificates = []tls.Certificate{pair}
		}
		opts = append(opts, kgo.DialTLSConfig(config))
	}
	user, pass := a.extra["sasl.username"], a.extra["sasl.password"]
	switch m := a.extra["sasl.mechanism"]; m {
	case "":
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()))
	default:
		usage("-X sasl.mechanism=%s: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", m)
	}
	return opts
}

func logLevel(a *args) kgo.LogLevel {
	v, ok := a.extra["log"]
	if !ok {
		if os.Getenv("FRANZ_LOG") == "1" {
			return kgo.LogLevelInfo
		}
		return kgo.LogLevelNone
	}
	switch strings.ToLower(v) {
	case "true", "1", "info":
		return kgo.LogLevelInfo
	case "debug":
		return kgo.LogLevelDebug
	case "warn":
		return kgo.LogLevelWarn
	case "error":
		return kgo.LogLevelError
	case "false", "0", "none":
		return kgo.LogLevelNone
	}
	usage("-X log=%s: one of true, false, info, debug, warn, error", v)
	return kgo.LogLevelNone
}

func newClient(opts []kgo.Opt) *kgo.Client {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		// NewClient does not connect: its errors are invalid options.
		usage("configuration: %v", err)
	}
	return cl
}

// topicMetadata asks a broker for one topic's metadata (or every topic's,
// topic ""), with AllowAutoTopicCreation=false: it never creates the topic.
func topicMetadata(ctx context.Context, cl *kgo.Client, topic string) (*kmsg.MetadataResponse, error) {
	req := kmsg.NewPtrMetadataRequest()
	if topic != "" {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
	}
	req.AllowAutoTopicCreation = false
	return req.RequestWith(ctx, cl)
}

func findTopic(md *kmsg.MetadataResponse, topic string) *kmsg.MetadataResponseTopic {
	for i := range md.Topics {
		if md.Topics[i].Topic != nil && *md.Topics[i].Topic == topic {
			return &md.Topics[i]
		}
	}
	return nil
}

func sortedPartitions(t *kmsg.MetadataResponseTopic) []kmsg.MetadataResponseTopicPartition {
	parts := append([]kmsg.MetadataResponseTopicPartition(nil), t.Partitions...)
	sort.Slice(parts, func(i, j int) bool { return parts[i].Partition < parts[j].Partition })
	return parts
}

// partitionsOf: the topic's sorted partition numbers, or an error text.
func partitionsOf(ctx context.Context, cl *kgo.Client, topic string) ([]int32, string) {
	md, err := topicMetadata(ctx, cl, topic)
	if err != nil {
		return nil, errText(err)
	}
	t := findTopic(md, topic)
	if t == nil {
		return nil, "not in metadata"
	}
	if t.ErrorCode != 0 {
		return nil, kerrText(t.ErrorCode, nil)
	}
	var parts []int32
	for _, p := range sortedPartitions(t) {
		parts = append(parts, p.Partition)
	}
	if len(parts) == 0 {
		return nil, "no partitions"
	}
	return parts, ""
}

// --- produce ---------------------------------------------------------------------------

func produce(a *args) {
	topic := a.get("--topic", nil)
	count := a.int("--count", nil)
	if count < 0 {
		usage("--count must be >= 0")
	}
	start := a.int("--start", i64(0))
	compression := a.choice("--compression", "none", []string{"none", "gzip", "snappy", "lz4", "zstd"})
	acks := a.choice("--acks", "all", []string{"0", "1", "all", "-1"})
	idempotentFlag := a.has("--idempotent")
	noIdempotent := a.has("--no-idempotent")
	if idempotentFlag && noIdempotent {
		usage("--idempotent and --no-idempotent exclude each other")
	}
	allAcks := acks == "all" || acks == "-1"
	if idempotentFlag && !allAcks {
		usage("--idempotent needs --acks all (franz-go requires acks=all for idempotence)")
	}
	// franz-go's default is idempotent; it refuses acks 0 and 1 unless
	// idempotence is disabled.
	idempotent := allAcks && !noIdempotent
	keyed := a.has("--keyed")
	partition := int64(-1)
	if _, ok := a.values["--partition"]; ok {
		partition = a.int("--partition", nil)
		if partition < 0 || partition > math.MaxInt32 {
			usage("--partition must be >= 0")
		}
	}
	size := a.int("--value-size", i64(0))
	prefix := a.get("--value-prefix", &compression)
	linger := a.int("--linger-ms", i64(5))
	if linger < 0 {
		usage("--linger-ms must be >= 0")
	}
	timeout := a.secs("--timeout", 60)
	if timeout <= 0 {
		usage("--timeout must be > 0")
	}

	if v, ok := a.extra["max.version"]; ok && compression == "zstd" {
		// franz-go silently sends batches uncompressed when the
		// negotiated Produce version predates zstd (v7, Kafka 2.1).
		if vs := kversion.FromString(v); vs != nil {
			if max, ok := vs.LookupMaxKeyVersion(0); ok && max < 7 {
				usage("zstd needs Produce v7 (Kafka 2.1); -X max.version=%s caps Produce at v%d", v, max)
			}
		}
	}
	opts := commonOpts(a, "franz_produce")
	opts = append(opts, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(time.Duration(linger)*time.Millisecond),
		kgo.RecordDeliveryTimeout(secsDuration(timeout)))
	switch acks {
	case "0":
		opts = append(opts, kgo.RequiredAcks(kgo.NoAck()))
	case "1":
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()))
	default:
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	}
	if !idempotent {
		opts = append(opts, kgo.DisableIdempotentWrite())
	}
	switch compression {
	case "none":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.NoCompression()))
	case "gzip":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.GzipCompression()))
	case "snappy":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.SnappyCompression()))
	case "lz4":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	case "zstd":
		opts = append(opts, kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	}
	if partition >= 0 {
		opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	} else {
		switch p := a.extra["partitioner"]; p {
		case "", "sticky":
			opts = append(opts, kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
		case "uniform":
			opts = append(opts, kgo.RecordPartitioner(kgo.UniformBytesPartitioner(64<<10, true, true, nil)))
		case "roundrobin":
			opts = append(opts, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
		case "leastbackup":
			opts = append(opts, kgo.RecordPartitioner(kgo.LeastBackupPartitioner()))
		default:
			usage("-X partitioner=%s: one of sticky, uniform, roundrobin, leastbackup", p)
		}
	}
	if _, ok := a.extra["max.inflight"]; ok {
		opts = append(opts, kgo.MaxProduceRequestsInflightPerBroker(int(a.extraInt("max.inflight", 1))))
	}
	cl := newClient(opts)

	type delivery struct {
		partition int32
		offset    int64
		value     string
	}
	var mu sync.Mutex
	var delivered []delivery
	var errs []string
	resolved := int64(0)

	ctx, cancel := context.WithTimeout(context.Background(), secsDuration(timeout+5))
	defer cancel()
	for i := start; i < start+count && ctx.Err() == nil; i++ {
		v := valueFor(prefix, i, size)
		r := &kgo.Record{Topic: topic, Value: []byte(v)}
		if keyed {
			r.Key = []byte(fmt.Sprintf("k%d", i%16))
		}
		if partition >= 0 {
			r.Partition = int32(partition)
		}
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			defer crashOnPanic()
			mu.Lock()
			defer mu.Unlock()
			resolved++
			if err != nil {
				errs = append(errs, errText(err))
				return
			}
			off := r.Offset
			if acks == "0" {
				off = -1
			}
			delivered = append(delivered, delivery{r.Partition, off, string(r.Value)})
		})
	}
	flushErr := cl.Flush(ctx)

	mu.Lock()
	// A snapshot: records still pending (Flush timed out) are undelivered;
	// closing the client would fail them as FRANZ_CLIENT_CLOSED.
	partitions := map[string]interface{}{}
	offsets := map[string]interface{}{}
	values := make([]string, 0, len(delivered))
	for _, d := range delivered {
		incr(partitions, d.partition)
		if d.offset >= 0 {
			addOffset(offsets, d.partition, d.offset)
		}
		values = append(values, d.value)
	}
	undelivered := count - int64(len(delivered)) - int64(len(errs))
	if undelivered < 0 {
		undelivered = 0
	}
	result := map[string]interface{}{
		"delivered":   int64(len(delivered)),
		"count":       count,
		"undelivered": undelivered,
		"errors":      topErrors(errs),
		"error_count": int64(len(errs)),
		"partitions":  partitions,
		"offsets":     offsets,
		"values_sha":  valuesSha(values),
		"elapsed_s":   elapsed(),
		"client":      "franz-go " + moduleVersion("github.com/twmb/franz-go"),
	}
	ok := int64(len(delivered)) == count
	msg := ""
	if !ok {
		top := topErrors(errs)
		if len(top) > 3 {
			top = top[:3]
		}
		msg = fmt.Sprintf("franz produce: delivered %d of %d (%v)", len(delivered), count, top)
		if flushErr != nil {
			msg += fmt.Sprintf("; flush: %v", flushErr)
		}
	}
	mu.Unlock()
	if flushErr == nil {
		withTimeout(5*time.Second, cl.Close)
	}
	emit(result, ok, msg)
}

// --- consume ---------------------------------------------------------------------------

type record struct {
	partition int32
	offset    int64
	key       interface{} // string or nil
	value     interface{}
}

type consumeState struct {
	mu         sync.Mutex
	expect     int64
	seen       map[[2]int64]*record
	received   int64
	byMember   map[string]interface{}
	inOrder    bool
	violations []interface{}
	errs       []string
	done       bool
	reachedAt  time.Time
}

func (st *consumeState) addError(s string) {
	st.mu.Lock()
	st.errs = append(st.errs, s)
	st.mu.Unlock()
}

func bytesOrNil(b []byte) interface{} {
	if b == nil {
		return nil
	}
	return string(b)
}

// memberState: one member's view: the last offset it saw per partition
// (order check), its count, and (--commit) the offsets to commit: one past
// the last record it counted per partition, with that record's leader epoch.
type memberState struct {
	idx    int
	topic  string
	mu     sync.Mutex
	last   map[int32]int64
	count  int64
	marks  map[int32]kgo.EpochOffset
	final  bool // the last commit is done: revocations no longer commit
	client *kgo.Client
}

// see records one delivered record; false once the run is done (the record
// is then neither counted nor marked for commit).
func (st *consumeState) see(m *memberState, r *kgo.Record, mark bool) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done {
		return false
	}
	m.mu.Lock()
	if prev, ok := m.last[r.Partition]; ok && r.Offset <= prev {
		st.inOrder = false
		if len(st.violations) < 10 {
			st.violations = append(st.violations, []interface{}{int64(r.Partition), prev, r.Offset})
		}
	}
	m.last[r.Partition] = r.Offset
	m.count++
	st.byMember[strconv.Itoa(m.idx)] = m.count
	if mark {
		if cur, ok := m.marks[r.Partition]; !ok || r.Offset+1 > cur.Offset {
			m.marks[r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset + 1}
		}
	}
	m.mu.Unlock()
	st.received++
	k := [2]int64{int64(r.Partition), r.Offset}
	if _, ok := st.seen[k]; !ok {
		st.seen[k] = &record{r.Partition, r.Offset, bytesOrNil(r.Key), bytesOrNil(r.Value)}
	}
	if int64(len(st.seen)) >= st.expect && st.reachedAt.IsZero() {
		st.reachedAt = time.Now()
	}
	return true
}

// commitMarks commits the member's marks synchronously; errors go to st.
func (m *memberState) commitMarks(ctx context.Context, cl *kgo.Client, st *consumeState, when string) {
	m.mu.Lock()
	if len(m.marks) == 0 {
		m.mu.Unlock()
		return
	}
	offsets := map[string]map[int32]kgo.EpochOffset{m.topic: {}}
	for p, eo := range m.marks {
		offsets[m.topic][p] = eo
	}
	m.mu.Unlock()
	cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			st.addError(fmt.Sprintf("member %d: commit (%s): %s", m.idx, when, errText(err)))
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					st.addError(fmt.Sprintf("member %d: commit (%s): %s", m.idx, when, kerrText(p.ErrorCode, nil)))
				}
			}
		}
	})
}

func consume(a *args) {
	topic := a.get("--topic", nil)
	expect := a.int("--expect", nil)
	assign := a.has("--assign")
	_, hasGroup := a.values["--group"]
	if !assign && !hasGroup {
		usage("--group is required unless --assign")
	}
	group := a.get("--group", str(""))
	members := int64(1)
	if !assign {
		members = a.int("--members", i64(1))
		if members < 1 {
			usage("--members must be >= 1")
		}
	}
	commit := !assign && a.has("--commit")
	timeout := a.secs("--timeout", 60)
	linger := a.secs("--linger", 0)
	deadline := t0.Add(secsDuration(timeout))
	a.bootstrap()

	// Group options, checked before anything runs.
	var balancer kgo.GroupBalancer
	switch b := a.extra["balance"]; b {
	case "", "cooperative-sticky":
		balancer = kgo.CooperativeStickyBalancer()
	case "sticky":
		balancer = kgo.StickyBalancer()
	case "range":
		balancer = kgo.RangeBalancer()
	case "roundrobin":
		balancer = kgo.RoundRobinBalancer()
	default:
		usage("-X balance=%s: one of cooperative-sticky, sticky, range, roundrobin", b)
	}
	serverSide := false
	switch p := a.extra["group.protocol"]; p {
	case "", "classic":
	case "consumer":
		serverSide = true
		if a.extra["balance"] == "roundrobin" {
			usage("-X group.protocol=consumer needs -X balance=range, sticky or cooperative-sticky " +
				"(franz-go would silently use the classic protocol)")
		}
	default:
		usage("-X group.protocol=%s: one of classic, consumer", p)
	}

	st := &consumeState{expect: expect, seen: map[[2]int64]*record{}, byMember: map[string]interface{}{}, inOrder: true}
	if expect <= 0 {
		st.reachedAt = time.Now()
	}
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	alive := int64(members)
	var aliveMu sync.Mutex
	memberDied := func() {
		aliveMu.Lock()
		alive--
		aliveMu.Unlock()
	}
	fetchWait := a.extraMs("fetch.max.wait.ms", 500*time.Millisecond)
	consumerOpts := func(clientID string) []kgo.Opt {
		opts := commonOpts(a, clientID)
		opts = append(opts, kgo.FetchMaxWait(fetchWait), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if !a.extraBool("fetch.sessions", true) {
			opts = append(opts, kgo.DisableFetchSessions())
		}
		return opts
	}

	var ms []*memberState
	if assign {
		st.byMember["0"] = int64(0)
		m := &memberState{idx: 0, topic: topic, last: map[int32]int64{}, marks: map[int32]kgo.EpochOffset{}}
		ms = append(ms, m)
		// Validates the options (exit 2) before the goroutine runs.
		newClient(consumerOpts("franz_consume-0")).Close()
		wg.Add(1)
		go func() {
			defer crashOnPanic()
			defer wg.Done()
			mdClient := newClient(commonOpts(a, "franz_consume-0"))
			var parts []int32
			var why string
			for {
				mctx, mcancel := context.WithTimeout(ctx, 10*time.Second)
				parts, why = partitionsOf(mctx, mdClient, topic)
				mcancel()
				if parts != nil || ctx.Err() != nil || time.Now().After(deadline) || why == "not in metadata" ||
					strings.HasPrefix(why, "UNKNOWN_TOPIC_OR_PARTITION") {
					break
				}
				select {
				case <-ctx.Done():
				case <-time.After(500 * time.Millisecond):
				}
			}
			mdClient.Close()
			if parts == nil {
				st.addError("no partitions for " + topic + ": " + why)
				memberDied()
				return
			}
			at := map[int32]kgo.Offset{}
			for _, p := range parts {
				at[p] = kgo.NewOffset().AtStart()
			}
			cl := newClient(append(consumerOpts("franz_consume-0"),
				kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: at})))
			m.client = cl
			pollLoop(ctx, cl, st, m, false)
		}()
	} else {
		for i := 0; i < int(members); i++ {
			idx := i
			st.byMember[strconv.Itoa(idx)] = int64(0)
			m := &memberState{idx: idx, topic: topic, last: map[int32]int64{}, marks: map[int32]kgo.EpochOffset{}}
			ms = append(ms, m)
			opts := consumerOpts(fmt.Sprintf("franz_consume-%d", idx))
			opts = append(opts,
				kgo.ConsumerGroup(group),
				kgo.ConsumeTopics(topic),
				kgo.Balancers(balancer),
				kgo.DisableAutoCommit(),
				kgo.BlockRebalanceOnPoll(),
				kgo.SessionTimeout(a.extraMs("session.timeout.ms", 10*time.Second)),
				kgo.HeartbeatInterval(a.extraMs("heartbeat.interval.ms", time.Second)),
				kgo.RebalanceTimeout(a.extraMs("rebalance.timeout.ms", 20*time.Second)),
				kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
					defer crashOnPanic()
					// A new assignment may start over from its commit.
					m.mu.Lock()
					for _, p := range assigned[topic] {
						delete(m.last, p)
					}
					m.mu.Unlock()
				}),
				kgo.OnPartitionsRevoked(func(cctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
					defer crashOnPanic()
					m.mu.Lock()
					final := m.final
					m.mu.Unlock()
					if commit && !final {
						rctx, rcancel := context.WithTimeout(cctx, 15*time.Second)
						m.commitMarks(rctx, cl, st, "revoked")
						rcancel()
					}
					m.mu.Lock()
					for _, p := range revoked[topic] {
						delete(m.marks, p)
						delete(m.last, p)
					}
					m.mu.Unlock()
				}),
				kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
					defer crashOnPanic()
					m.mu.Lock()
					for _, p := range lost[topic] {
						delete(m.marks, p)
						delete(m.last, p)
					}
					m.mu.Unlock()
				}),
			)
			if serverSide {
				opts = append(opts, kgo.ServerSideBalancer())
			}
			m.client = newClient(opts)
		}
		for _, m := range ms {
			wg.Add(1)
			go func() {
				defer crashOnPanic()
				defer wg.Done()
				pollLoop(ctx, m.client, st, m, commit)
				if commit {
					// The last commit, before any member leaves.
					cctx, ccancel := context.WithTimeout(context.Background(), 15*time.Second)
					m.commitMarks(cctx, m.client, st, "end")
					ccancel()
				}
				m.mu.Lock()
				m.final = true
				m.mu.Unlock()
			}()
		}
	}

	for time.Now().Before(deadline) {
		st.mu.Lock()
		r := st.reachedAt
		st.mu.Unlock()
		if !r.IsZero() && time.Since(r) >= secsDuration(linger) {
			break
		}
		aliveMu.Lock()
		dead := alive <= 0
		aliveMu.Unlock()
		if dead {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	st.mu.Lock()
	st.done = true
	st.mu.Unlock()
	// Ends every poll; each member commits once more.
	cancel()
	if !withTimeout(30*time.Second, wg.Wait) {
		st.addError("members did not stop within 30 s")
	}

	committed := map[string]interface{}{}
	if !assign {
		// The members' last commits are done; they leave the group on
		// Close below.
		ok := withTimeout(20*time.Second, func() {
			actx, acancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer acancel()
			cl := newClient(commonOpts(a, "franz_consume-admin"))
			defer cl.Close()
			parts, why := partitionsOf(actx, cl, topic)
			if parts == nil {
				st.addError("committed: " + why)
				return
			}
			resp, err := kadm.NewClient(cl).FetchOffsets(actx, group)
			if err != nil {
				st.addError("committed: " + errText(err))
			}
			for _, p := range parts {
				k := strconv.Itoa(int(p))
				o, found := resp.Lookup(topic, p)
				switch {
				case !found:
					committed[k] = nil
				case o.Err != nil:
					st.addError("committed: " + errText(o.Err))
					committed[k] = nil
				case o.At < 0:
					committed[k] = nil
				default:
					committed[k] = o.At
				}
			}
		})
		if !ok {
			st.addError("committed: timed out")
		}
	}
	var cwg sync.WaitGroup
	for _, m := range ms {
		if m.client == nil {
			continue
		}
		cwg.Add(1)
		go func() {
			defer crashOnPanic()
			defer cwg.Done()
			if !withTimeout(15*time.Second, m.client.CloseAllowingRebalance) {
				st.addError(fmt.Sprintf("member %d: close: timed out", m.idx))
			}
		}()
	}
	cwg.Wait()

	st.mu.Lock()
	defer st.mu.Unlock()
	recs := make([]*record, 0, len(st.seen))
	for _, r := range st.seen {
		recs = append(recs, r)
	}
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].partition != recs[j].partition {
			return recs[i].partition < recs[j].partition
		}
		return recs[i].offset < recs[j].offset
	})
	partitions := map[string]interface{}{}
	offsets := map[string]interface{}{}
	values := make([]string, 0, len(recs))
	list := make([]interface{}, 0, len(recs))
	for _, r := range recs {
		incr(partitions, r.partition)
		addOffset(offsets, r.partition, r.offset)
		if v, ok := r.value.(string); ok {
			values = append(values, v)
		}
		list = append(list, []interface{}{int64(r.partition), r.offset, r.key, r.value})
	}
	violations := st.violations
	if violations == nil {
		violations = []interface{}{}
	}
	result := map[string]interface{}{
		"records":                int64(len(st.seen)),
		"received":               st.received,
		"duplicates":             st.received - int64(len(st.seen)),
		"expect":                 expect,
		"by_member":              st.byMember,
		"partitions":             partitions,
		"offsets":                offsets,
		"per_partition_in_order": st.inOrder,
		"order_violations":       violations,
		"values_sha":             valuesSha(values),
		"committed":              committed,
		"errors":                 topErrors(st.errs),
		"elapsed_s":              elapsed(),
	}
	if a.has("--records") {
		result["records_list"] = list
	}
	ok := int64(len(st.seen)) >= expect
	msg := ""
	if !ok {
		msg = fmt.Sprintf("franz consume: saw %d of %d records in %g s", len(st.seen), expect, timeout)
	}
	emit(result, ok, msg)
}

// pollLoop polls until ctx ends or the run is done. With BlockRebalanceOnPoll
// the group's callbacks wait for AllowRebalance, i.e. they run between polls.
func pollLoop(ctx context.Context, cl *kgo.Client, st *consumeState, m *memberState, mark bool) {
	defer cl.AllowRebalance()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		if fs.IsClientClosed() {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.Canceled) && ctx.Err() != nil {
				return
			}
			where := fmt.Sprintf("member %d", m.idx)
			if t != "" {
				where = fmt.Sprintf("member %d: %s[%d]", m.idx, t, p)
			}
			st.addError(where + ": " + errText(err))
		})
		stop := false
		fs.EachRecord(func(r *kgo.Record) {
			if !stop && !st.see(m, r, mark) {
				stop = true
			}
		})
		cl.AllowRebalance()
		if stop {
			return
		}
	}
}

// --- admin -----------------------------------------------------------------------------

func admin(a *args) {
	if len(a.positional) != 1 {
		usage("admin needs one of create|describe|delete|offsets")
	}
	op := a.positional[0]
	if !contains([]string{"create", "describe", "delete", "offsets"}, op) {
		usage("unknown admin operation %s", op)
	}
	a.bootstrap()
	_, hasTopic := a.values["--topic"]
	topic := a.get("--topic", str(""))
	if op != "describe" && !hasTopic {
		usage("%s needs --topic", op)
	}
	timeout := a.secs("--timeout", 30)
	if timeout <= 0 {
		usage("--timeout must be > 0")
	}
	numPartitions := a.int("--partitions", i64(8))
	replicationFactor := a.int("--replication-factor", i64(1))
	configEntries := map[string]*string{}
	for _, kv := range a.repeated["--config"] {
		eq := strings.Index(kv, "=")
		if eq < 0 {
			usage("bad --config %s: expected key=value", kv)
		}
		v := kv[eq+1:]
		configEntries[kv[:eq]] = &v
	}

	cl := newClient(commonOpts(a, "franz_admin"))
	adm := kadm.NewClient(cl)
	adm.SetTimeoutMillis(int32(math.Min(timeout*1000, math.MaxInt32)))
	ctx, cancel := context.WithTimeout(context.Background(), secsDuration(timeout+5))
	defer cancel()

	r := map[string]interface{}{"op": op, "error": nil}
	if hasTopic {
		r["topic"] = topic
	} else {
		r["topic"] = nil
	}
	var errStr interface{}
	setErr := func(s string) { errStr = s }

	switch op {
	case "create":
		var configs map[string]*string
		if len(configEntries) > 0 {
			configs = configEntries
		}
		resp, err := adm.CreateTopics(ctx, int32(numPartitions), int16(replicationFactor), configs, topic)
		if err != nil {
			setErr(errText(err))
		} else if t, ok := resp[topic]; !ok {
			setErr("FRANZ_ERROR: the topic is not in the CreateTopics response")
		} else if t.Err != nil {
			setErr(errText(withBrokerMsg(t.Err, &t.ErrMessage)))
		}
	case "delete":
		resp, err := adm.DeleteTopics(ctx, topic)
		if err != nil {
			setErr(errText(err))
		} else if t, ok := resp[topic]; !ok {
			setErr("FRANZ_ERROR: the topic is not in the DeleteTopics response")
		} else if t.Err != nil {
			setErr(errText(withBrokerMsg(t.Err, &t.ErrMessage)))
		}
	case "describe":
		describe(ctx, cl, adm, topic, r, setErr)
	case "offsets":
		earliest, latest := map[string]interface{}{}, map[string]interface{}{}
		r["earliest"], r["latest"] = earliest, latest
		md, err := topicMetadata(ctx, cl, topic)
		if err != nil {
			setErr(errText(err))
			break
		}
		t := findTopic(md, topic)
		if t == nil {
			setErr(kerrText(kerr.UnknownTopicOrPartition.Code, nil))
			break
		}
		if t.ErrorCode != 0 {
			setErr(kerrText(t.ErrorCode, nil))
			break
		}
		for _, side := range []struct {
			out  map[string]interface{}
			list func(context.Context, ...string) (kadm.ListedOffsets, error)
		}{{earliest, adm.ListStartOffsets}, {latest, adm.ListEndOffsets}} {
			listed, err := side.list(ctx, topic)
			if err != nil {
				setErr(errText(err))
				break
			}
			for _, p := range sortedPartitions(t) {
				o, ok := listed.Lookup(topic, p.Partition)
				if !ok {
					setErr(fmt.Sprintf("FRANZ_ERROR: partition %d is not in the ListOffsets response", p.Partition))
					continue
				}
				if o.Err != nil {
					setErr(errText(o.Err))
					continue
				}
				side.out[strconv.Itoa(int(p.Partition))] = o.Offset
			}
		}
	}
	withTimeout(5*time.Second, cl.Close)

	r["error"] = errStr
	r["ok"] = errStr == nil
	ok := errStr == nil || a.has("--allow-error")
	msg := ""
	if !ok {
		msg = fmt.Sprintf("franz admin %s: %v", op, errStr)
	}
	emit(r, ok, msg)
}

func describe(ctx context.Context, cl *kgo.Client, adm *kadm.Client, topic string, r map[string]interface{}, setErr func(string)) {
	r["brokers"], r["cluster_id"], r["controller_id"], r["topics"] = []interface{}{}, nil, nil, map[string]interface{}{}
	md, err := topicMetadata(ctx, cl, topic)
	if err != nil {
		setErr(errText(err))
	} else {
		brokers := []interface{}{}
		bs := append([]kmsg.MetadataResponseBroker(nil), md.Brokers...)
		sort.Slice(bs, func(i, j int) bool { return bs[i].NodeID < bs[j].NodeID })
		for _, b := range bs {
			brokers = append(brokers, map[string]interface{}{"id": b.NodeID, "host": b.Host, "port": b.Port})
		}
		r["brokers"] = brokers
		if md.ClusterID != nil {
			r["cluster_id"] = *md.ClusterID
		}
		if md.Version >= 1 {
			r["controller_id"] = md.ControllerID
		}
		topics := map[string]interface{}{}
		for i := range md.Topics {
			t := &md.Topics[i]
			if t.Topic == nil {
				continue
			}
			leaders, replicas, isrs := map[string]interface{}{}, map[string]interface{}{}, map[string]interface{}{}
			var terr interface{}
			if t.ErrorCode != 0 {
				terr = kerrText(t.ErrorCode, nil)
			}
			for _, p := range sortedPartitions(t) {
				k := strconv.Itoa(int(p.Partition))
				leaders[k] = p.Leader
				replicas[k] = append([]int32{}, p.Replicas...)
				isrs[k] = append([]int32{}, p.ISR...)
			}
			topics[*t.Topic] = map[string]interface{}{
				"partitions": int64(len(t.Partitions)), "error": terr,
				"leaders": leaders, "replicas": replicas, "isrs": isrs,
			}
		}
		r["topics"] = topics
		if topic != "" {
			if t, ok := topics[topic].(map[string]interface{}); ok && t["error"] != nil {
				setErr(t["error"].(string))
			} else if !ok {
				setErr(kerrText(kerr.UnknownTopicOrPartition.Code, nil))
			}
		}
	}
	if topic == "" {
		return
	}
	configs := map[string]interface{}{}
	r["configs"], r["configs_error"] = configs, nil
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		r["configs_error"] = errText(err)
		return
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		r["configs_error"] = errText(err)
		return
	}
	if rc.Err != nil {
		r["configs_error"] = errText(withBrokerMsg(rc.Err, &rc.ErrMessage))
		return
	}
	for _, c := range rc.Configs {
		if c.Value == nil {
			configs[c.Key] = nil
		} else {
			configs[c.Key] = *c.Value
		}
	}
}

// --- main ------------------------------------------------------------------------------

// moduleVersion: a dependency's version from the build information.
func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				if d.Replace != nil {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return "unknown"
}

func version() {
	fmt.Printf("franz-go %s (kmsg %s, kadm %s, %s; codecs gzip, snappy, lz4, zstd (pure Go))\n",
		moduleVersion("github.com/twmb/franz-go"), moduleVersion("github.com/twmb/franz-go/pkg/kmsg"),
		moduleVersion("github.com/twmb/franz-go/pkg/kadm"), runtime.Version())
	os.Exit(0)
}

func main() {
	defer func() {
		if r := recover(); r != nil {
			if u, ok := r.(usageError); ok {
				fmt.Fprintf(os.Stderr, "franz client: %s (--help for usage)\n", string(u))
				os.Exit(2)
			}
			crash(r)
		}
	}()
	argv := os.Args[1:]
	if len(argv) < 1 {
		usage("a command is needed: produce|consume|admin|version")
	}
	command := argv[0]
	switch command {
	case "-h", "--help":
		fmt.Println(usageText)
		os.Exit(0)
	case "version":
		version()
	}
	if _, ok := flagNames[command]; !ok {
		usage("unknown command %s", command)
	}
	a := parseArgs(command, argv[1:])
	logLevel(a) // a bad -X log= is a usage error up front
	switch command {
	case "produce":
		produce(a)
	case "consume":
		consume(a)
	case "admin":
		admin(a)
	}
}
